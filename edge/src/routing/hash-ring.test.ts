import { describe, expect, it } from 'vitest'
import { KeyHash } from './key-hash.ts'
import { HashRing, ringFor, ringOrder } from './hash-ring.ts'

const keyPoints = (n: number) => Array.from({ length: n }, (_, i) => new KeyHash().text(`conversation-${i}`).point())
const owners = (ring: HashRing, points: number[]) => points.map((p) => ring.walk(p)[0]!)

describe('HashRing', () => {
  const points = keyPoints(20_000)

  it('gives a key the same node on every walk and on a ring built from the same ids in another order', () => {
    const a = new HashRing(['n1', 'n2', 'n3', 'n4'])
    const b = new HashRing(['n3', 'n1', 'n4', 'n2'])
    expect(owners(a, points)).toEqual(owners(b, points))
    expect(owners(a, points.slice(0, 50))).toEqual(owners(a, points.slice(0, 50)))
  })

  it('walks every node exactly once, starting at the owner', () => {
    const ring = new HashRing(['n1', 'n2', 'n3'])
    for (const p of points.slice(0, 200)) {
      const walk = ring.walk(p)
      expect([...walk].sort()).toEqual(['n1', 'n2', 'n3'])
    }
    expect(new HashRing([]).walk(5)).toEqual([])
    expect(new HashRing(['solo']).walk(5)).toEqual(['solo'])
  })

  it('shares keys fairly: each of 4 nodes owns within 15% of a quarter', () => {
    const counts = new Map<string, number>()
    for (const id of owners(new HashRing(['n1', 'n2', 'n3', 'n4']), points)) counts.set(id, (counts.get(id) ?? 0) + 1)
    for (const c of counts.values()) expect(Math.abs(c / points.length - 0.25)).toBeLessThan(0.25 * 0.15)
  })

  it('moves only the keys a joining node takes over (about 1/N), all of them to it', () => {
    const before = owners(new HashRing(['n1', 'n2', 'n3', 'n4']), points)
    const after = owners(new HashRing(['n1', 'n2', 'n3', 'n4', 'n5']), points)
    const moved = before.flatMap((id, i) => (id === after[i] ? [] : [after[i]]))
    expect(new Set(moved)).toEqual(new Set(['n5']))
    expect(moved.length / points.length).toBeGreaterThan(0.2 * 0.8)
    expect(moved.length / points.length).toBeLessThan(0.2 * 1.2)
  })

  it('moves only the keys of a node that leaves, and keeps their next choice consistent with the walk', () => {
    const full = new HashRing(['n1', 'n2', 'n3', 'n4'])
    const without = new HashRing(['n1', 'n2', 'n4'])
    for (const p of points.slice(0, 5000)) {
      const walk = full.walk(p)
      const now = without.walk(p)[0]
      // A key of n3 goes to the next node on its own walk; every other key stays.
      expect(now).toBe(walk[0] === 'n3' ? walk[1] : walk[0])
    }
  })
})

describe('ringOrder / ringFor', () => {
  it('orders node objects by the ring and reuses one ring per set of ids', () => {
    const nodes = [{ id: 'b' }, { id: 'a' }, { id: 'c' }]
    const point = new KeyHash().text('k').point()
    expect(ringOrder(nodes, point).map((n) => n.id)).toEqual(new HashRing(['a', 'b', 'c']).walk(point))
    expect(ringFor(['c', 'a', 'b'])).toBe(ringFor(['a', 'b', 'c']))
  })
})
