import { describe, expect, it } from 'vitest'
import { Supersessions } from './supersessions.ts'

/** Which requests a supersede group ends, in what order, and that groups never touch each other. */

function track(s: Supersessions, tenant: string, key: string, at?: number) {
  const ticket = s.arrive(tenant, key, at)
  const state = { ended: false, ticket }
  ticket.onSuperseded(() => (state.ended = true))
  return state
}

describe('Supersessions', () => {
  it('ends every older request of the group when a newer one arrives, and only those', () => {
    const s = new Supersessions()
    const a = track(s, 'acme', 'doc-1')
    const b = track(s, 'acme', 'doc-1')
    expect(a.ended).toBe(true)
    expect(b.ended).toBe(false)
    const c = track(s, 'acme', 'doc-1')
    expect(b.ended).toBe(true)
    expect(c.ended).toBe(false)
    expect(s.running('acme', 'doc-1')).toBe(1)
  })

  it('keeps tenants and keys apart', () => {
    const s = new Supersessions()
    const a = track(s, 'acme', 'doc-1')
    const otherTenant = track(s, 'globex', 'doc-1')
    const otherKey = track(s, 'acme', 'doc-2')
    expect([a.ended, otherTenant.ended, otherKey.ended]).toEqual([false, false, false])
    // A tenant cannot spell another tenant's group through its key.
    track(s, 'acme\ndoc', '1')
    expect(a.ended).toBe(false)
  })

  it('orders by the edge time: one that reaches the node after a newer one ends at once', () => {
    const s = new Supersessions()
    const newer = track(s, 'acme', 'k', 2000)
    const late = track(s, 'acme', 'k', 1000)
    expect(late.ended).toBe(true)
    expect(newer.ended).toBe(false)
    expect(s.running('acme', 'k')).toBe(1)
  })

  it("runs the end given after it was superseded at once, and a finished request's leave empties the group", () => {
    const s = new Supersessions()
    const first = s.arrive('acme', 'k')
    s.arrive('acme', 'k').leave()
    let ended = false
    first.onSuperseded(() => (ended = true))
    expect(ended).toBe(true)
    expect(s.running('acme', 'k')).toBe(0)
  })

  it("supersedes, on another node's word, only the requests the edge received before the newer one", () => {
    const s = new Supersessions()
    const old = track(s, 'acme', 'k', 1000)
    expect(s.supersede('acme', 'k', 1500)).toBe(1)
    expect(old.ended).toBe(true)
    const newest = track(s, 'acme', 'k', 2000)
    expect(s.supersede('acme', 'k', 1500)).toBe(0)
    expect(newest.ended).toBe(false)
    expect(s.supersede('acme', 'other', 9999)).toBe(0)
  })
})
