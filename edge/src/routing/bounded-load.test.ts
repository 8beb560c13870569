import { describe, expect, it } from 'vitest'
import { loadBound, loadCapacity } from './bounded-load.ts'

type N = { id: string }

describe('the bounded-load rule', () => {
  it('allows a node at most ⌈c · (total + 1) / n⌉ requests, counting this one', () => {
    expect(loadCapacity(0, 2, 1.25)).toBe(1)
    expect(loadCapacity(63, 2, 1.25)).toBe(40)
    expect(loadCapacity(8, 4, 1.25)).toBe(3)
    const nodes: N[] = [{ id: 'a' }, { id: 'b' }]
    const loads: Record<string, number> = { a: 9, b: 1 }
    // total 10: capacity ⌈1.25 · 11 / 2⌉ = 7.
    const bound = loadBound(nodes, (n) => loads[n.id]!, 1.25)
    expect(bound.capacity).toBe(7)
    expect(bound.fits(nodes[0]!)).toBe(false)
    expect(bound.fits(nodes[1]!)).toBe(true)
  })

  it('always lets the least-loaded node take the request, whatever the loads (c ≥ 1)', () => {
    const nodes: N[] = Array.from({ length: 4 }, (_, i) => ({ id: `n${i}` }))
    for (const loads of [[0, 0, 0, 0], [100, 0, 0, 0], [7, 7, 7, 6], [1000, 999, 1001, 1000]]) {
      const bound = loadBound(nodes, (n) => loads[Number(n.id.slice(1))]!, 1)
      const least = nodes[loads.indexOf(Math.min(...loads))]!
      expect(bound.fits(least)).toBe(true)
    }
  })
})
