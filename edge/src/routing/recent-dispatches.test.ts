import { describe, expect, it } from 'vitest'
import { MAX_OPEN_MS, RecentDispatches } from './recent-dispatches.ts'

describe('RecentDispatches', () => {
  it('counts open requests started at or after the heartbeat, and every open one for a static node', () => {
    let t = 1000
    const log = new RecentDispatches(() => t)
    const a = log.begin('n1')
    t = 2000
    log.begin('n1')
    log.begin('n2')
    expect(log.unseen('n1', 1500)).toBe(1) // the first was already running when the node beat at 1500
    expect(log.unseen('n1', 1000)).toBe(2)
    expect(log.unseen('n1', undefined)).toBe(2)
    expect(log.unseen('n2', 2000)).toBe(1)
    a.end()
    a.end()
    expect(log.unseen('n1', undefined)).toBe(1)
    expect(log.unseen('n3', undefined)).toBe(0)
  })

  it('moves a failed-over request to the node that answered, keeping its start', () => {
    let t = 1000
    const log = new RecentDispatches(() => t)
    const d = log.begin('n1')
    t = 1200
    d.moveTo('n2')
    expect(log.unseen('n1', undefined)).toBe(0)
    expect(log.unseen('n2', 1100)).toBe(0)
    expect(log.unseen('n2', 1000)).toBe(1)
    d.end()
    d.moveTo('n3')
    expect(log.unseen('n3', undefined)).toBe(0)
  })

  it('forgets a request whose end never came after MAX_OPEN_MS', () => {
    let t = 0
    const log = new RecentDispatches(() => t)
    log.begin('n1')
    t = MAX_OPEN_MS + 1
    expect(log.unseen('n1', undefined)).toBe(0)
  })
})
