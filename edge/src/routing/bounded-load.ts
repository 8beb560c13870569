/**
 * The load bound of consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA
 * 2018; HAProxy's `hash-balance-factor`): a node may take a request only while its load, counting
 * it, stays within c × the mean load of the region's nodes (also counting it). affinity-route.ts
 * places within it, so a popular prefix (one system prompt behind many conversations, one
 * prompt_cache_key for a whole app) overflows onto other nodes instead of piling onto one: no node
 * ever holds more than ⌈c·(m+1)/n⌉ of m requests in flight.
 *
 * capacity = ⌈c · (total + 1) / n⌉ with c ≥ 1: the least-loaded node always fits (its load is at
 * most ⌊total/n⌋, and ⌊total/n⌋ + 1 ≤ ⌈(total + 1)/n⌉), so some node always takes the request.
 */
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
