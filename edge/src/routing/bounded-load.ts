/**
 * Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018; HAProxy's
 * `hash-balance-factor`): walk the ring from the key's point and take the first node whose load,
 * counting this request, stays within c × the mean load of the region's nodes (also counting it).
 * A key keeps its node while that node is not much busier than its peers; a popular prefix (one
 * system prompt behind many conversations, one prompt_cache_key for a whole app) overflows onto
 * the next nodes of the ring instead of piling onto one: no node ever holds more than
 * ⌈c·(m+1)/n⌉ of m requests in flight.
 *
 * capacity = ⌈c · (total + 1) / n⌉ with c ≥ 1: the least-loaded node always fits (its load is at
 * most ⌊total/n⌋, and ⌊total/n⌋ + 1 ≤ ⌈(total + 1)/n⌉), so the walk always ends on a node.
 */
import { ringOrder } from './hash-ring.ts'

export interface BoundedChoice<N> {
  /** The chosen node: the first on the walk with room under the bound. */
  node: N
  /** The walk's first node, the key's home; `node` unless the home was over the bound. */
  home: N
}

/** The most requests a node may hold after taking this one. */
export function loadCapacity(totalLoad: number, nodeCount: number, balanceFactor: number): number {
  return Math.ceil((balanceFactor * (totalLoad + 1)) / nodeCount)
}

export interface LoadBound<N> {
  capacity: number
  /** Whether `node` may take this request without exceeding the bound. */
  fits(node: N): boolean
}

export function loadBound<N>(nodes: readonly N[], loadOf: (node: N) => number, balanceFactor: number): LoadBound<N> {
  let total = 0
  for (const n of nodes) total += loadOf(n)
  const capacity = loadCapacity(total, nodes.length, balanceFactor)
  return { capacity, fits: (n) => loadOf(n) + 1 <= capacity }
}

/** The bounded-load choice among `nodes` (non-empty, one region's usable nodes) for a key's ring point. */
export function chooseBounded<N extends { id: string }>(nodes: readonly N[], point: number, loadOf: (node: N) => number, balanceFactor: number): BoundedChoice<N> {
  const order = ringOrder(nodes, point)
  const bound = loadBound(nodes, loadOf, balanceFactor)
  // The least-loaded node always fits (see above); `order[0]` only guards a balance factor below 1.
  return { node: order.find(bound.fits) ?? order[0]!, home: order[0]! }
}
