import { describe, expect, it } from 'vitest'
import { chooseBounded, loadCapacity } from './bounded-load.ts'
import { KeyHash } from './key-hash.ts'
import { ringOrder } from './hash-ring.ts'

type N = { id: string }
const point = (s: string) => new KeyHash().text(s).point()

/** Places `keys` one after another, each placed request adding 1 to its node's load. */
function place(nodes: N[], keys: number[], c: number, initial: Record<string, number> = {}) {
  const load = new Map(nodes.map((n) => [n.id, initial[n.id] ?? 0]))
  const homes: string[] = []
  const chosen: string[] = []
  for (const k of keys) {
    const choice = chooseBounded(nodes, k, (n) => load.get(n.id)!, c)
    load.set(choice.node.id, load.get(choice.node.id)! + 1)
    homes.push(choice.home.id)
    chosen.push(choice.node.id)
  }
  return { load, homes, chosen }
}

describe('bounded-load consistent hashing', () => {
  const two = [{ id: 'us-east-1' }, { id: 'us-east-2' }]

  it('sends 64 requests that share one key over 2 nodes with most-loaded ÷ mean ≤ 1.5 (c = 1.25)', () => {
    const { load } = place(two, new Array(64).fill(point('one hot system prompt')), 1.25)
    const loads = [...load.values()]
    const mean = 64 / 2
    expect(Math.max(...loads) / mean).toBeLessThanOrEqual(1.5)
    // The bound itself: no node above ⌈c·m/n⌉.
    expect(Math.max(...loads)).toBeLessThanOrEqual(loadCapacity(63, 2, 1.25))
  })

  it('keeps the bound for a hot key over 3 and 5 nodes, and for c = 1.5', () => {
    for (const [count, c] of [[3, 1.25], [5, 1.25], [2, 1.5], [5, 1.5]] as const) {
      const nodes = Array.from({ length: count }, (_, i) => ({ id: `n${i}` }))
      const m = 120
      const { load } = place(nodes, new Array(m).fill(point('hot')), c)
      expect(Math.max(...load.values())).toBeLessThanOrEqual(Math.ceil((c * m) / count))
    }
  })

  it('gives each key its home node while loads are even, so distinct conversations spread by hash', () => {
    const keys = Array.from({ length: 64 }, (_, i) => point(`conversation ${i}`))
    // Even loads: every node has room, so each key lands at home.
    for (const k of keys) {
      const c = chooseBounded(two, k, () => 3, 1.25)
      expect(c.node).toBe(c.home)
    }
    const homes = new Set(keys.map((k) => ringOrder(two, k)[0]!.id))
    expect(homes).toEqual(new Set(two.map((n) => n.id)))
  })

  it('skips a home node that is over c × the mean and takes the next node on the ring', () => {
    const k = point('conversation 1')
    const [home, next] = ringOrder(two, k)
    // home 9, next 1: mean with this request (11/2) × 1.25 → capacity 7; home would be 10.
    const choice = chooseBounded(two, k, (n) => (n.id === home!.id ? 9 : 1), 1.25)
    expect(choice.home).toBe(home)
    expect(choice.node).toBe(next)
    // Within the bound it stays home even when busier than its peer.
    expect(chooseBounded(two, k, (n) => (n.id === home!.id ? 5 : 3), 1.25).node).toBe(home)
  })

  it('always finds a node: the least loaded one fits whatever the loads', () => {
    const nodes = Array.from({ length: 4 }, (_, i) => ({ id: `n${i}` }))
    for (const loads of [[0, 0, 0, 0], [100, 0, 0, 0], [7, 7, 7, 6], [1000, 999, 1001, 1000]]) {
      for (const k of [point('a'), point('b'), point('c')]) {
        const choice = chooseBounded(nodes, k, (n) => loads[Number(n.id.slice(1))]!, 1)
        expect(loads[Number(choice.node.id.slice(1))]! + 1).toBeLessThanOrEqual(loadCapacity(loads.reduce((a, b) => a + b), 4, 1))
      }
    }
  })
})
