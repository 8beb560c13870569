/**
 * Cache-affine routing (edge/README.md "Cache-affine routing"), pure: given today's ranking
 * (pick-node.ts: usable nodes serving the model, cheapest `RTT + queue wait` first), a request's
 * affinity key and where that key was last served (affinity-memory.ts), choose the node.
 *
 * Within a region: bounded loads (bounded-load.ts). The node the key was last served by keeps it
 * while it has room under the bound (the latest turn's KV is there); otherwise — a key seen
 * nowhere yet, or one whose node is over the bound — the least-loaded node takes it, ties going
 * along the ring from the key's point, so an idle region places a new conversation on its ring
 * home (every edge agrees without memory). A node's load is its requests in flight as its
 * heartbeat counted them, corrected by what this isolate sent and saw end since
 * (recent-dispatches.ts). Placing new keys on their ring homes whenever under the bound would let
 * up to ⌈c·(m+1)/n⌉ of them onto one node, which at a few conversations per node is most of them.
 *
 * Across regions: the best region by today's rule, unless the key was last served by a node in
 * another region that is still usable, has room under its region's bound, and costs less extra
 * than it saves:
 *   stay while  cost(that node) − cost(best region's node)  <  prompt tokens ÷ prefill tokens/s
 * where cost is pick-node's estimated RTT + queue wait, and the right side is the prefill the
 * move would repeat: the prompt's estimated tokens (body bytes / 4) at the would-be node's
 * published `prefillTokPerSec` (DEFAULT_PREFILL_TOK_PER_SEC if it publishes none). A short
 * conversation follows its client; a long one stays where its cache is until the detour
 * outweighs recomputing it.
 *
 * Nodes that are draining, stale, marked down or lack the model are not in the ranking, so they
 * are never chosen; a remembered node among them counts as gone, with the prefix it held: the
 * request is placed as a new key would be ("moved"), not on a peer of the lost node.
 */
import { loadBound } from './bounded-load.ts'
import { ringOrder } from './hash-ring.ts'
import { DEFAULT_PREFILL_TOK_PER_SEC, type RankedNode } from './pick-node.ts'
import type { AffinityReason } from '../context.ts'

/** Where a key was last served. */
export interface Placement {
  region: string
  node: string
  /** Epoch ms it was written (a newer placement wins). */
  atMs: number
}

/**
 * Prefill rate assumed for a node that publishes none (pick-node.ts): the order of a 7–8B model
 * on one current data-centre GPU. At this rate a 4k-token conversation is worth ~400 ms of extra
 * RTT — an ocean — and a 400-token one ~40 ms, a neighbouring region.
 */
export { DEFAULT_PREFILL_TOK_PER_SEC }

export interface AffinityOptions {
  /** c of the bounded-load rule (≥ 1). */
  balanceFactor: number
  /** The request's estimated prompt tokens. */
  promptTokens: number
  /** A node's load: running + waiting from its heartbeat, corrected by this isolate's requests since. */
  loadOf(node: RankedNode): number
}

export interface AffinityRoute {
  /** The chosen node first, then today's ranking for failover. */
  nodes: RankedNode[]
  reason: AffinityReason
}


export function routeByAffinity(ranked: readonly RankedNode[], point: number, remembered: Placement | undefined, opts: AffinityOptions): AffinityRoute {
  if (ranked.length === 0) return { nodes: [], reason: 'none' }
  const best = ranked[0]!
  const region = (name: string) => ranked.filter((n) => n.region === name)
  // The prefix lives on one node: a remembered node that is no longer usable took it along.
  const holder = remembered === undefined ? undefined : ranked.find((n) => n.id === remembered.node)

  let choice: { node: RankedNode; reason: AffinityReason }
  if (remembered === undefined) {
    choice = placeInRegion(region(best.region), point, undefined, opts)
  } else if (!holder) {
    choice = { node: placeInRegion(region(best.region), point, undefined, opts).node, reason: 'moved' }
  } else if (holder.region === best.region) {
    choice = placeInRegion(region(best.region), point, holder, opts)
  } else {
    // Staying pays only on the holder itself, and only while it has room under its region's bound.
    const move = placeInRegion(region(best.region), point, undefined, opts).node
    const roomy = loadBound(region(holder.region), opts.loadOf, opts.balanceFactor).fits(holder)
    const extraMs = holder.costMs - move.costMs
    choice = roomy && extraMs < prefillMs(opts.promptTokens, move) ? { node: holder, reason: 'hit' } : { node: move, reason: 'moved' }
  }
  return { nodes: [choice.node, ...ranked.filter((n) => n !== choice.node)], reason: choice.reason }
}

/** The prefill a node would spend on `tokens` it does not have cached, in ms. */
export function prefillMs(tokens: number, node: Pick<RankedNode, 'prefillTokPerSec'>): number {
  return (tokens / (node.prefillTokPerSec ?? DEFAULT_PREFILL_TOK_PER_SEC)) * 1000
}

/** One region's choice: the key's node while it fits the bound, else the least-loaded node in ring order. */
function placeInRegion(nodes: RankedNode[], point: number, holder: RankedNode | undefined, opts: AffinityOptions): { node: RankedNode; reason: AffinityReason } {
  const bound = loadBound(nodes, opts.loadOf, opts.balanceFactor)
  if (holder && bound.fits(holder)) return { node: holder, reason: 'hit' }
  const order = ringOrder(nodes, point)
  let node = order[0]!
  let least = opts.loadOf(node)
  for (const n of order) {
    const load = opts.loadOf(n)
    if (load < least) [node, least] = [n, load]
  }
  return { node, reason: node === (holder ?? order[0]) ? 'hit' : 'spread' }
}
