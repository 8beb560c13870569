/**
 * Node choice (DESIGN.md §5), pure: among fresh, non-draining, not-marked-down nodes that serve
 * the model, lowest estimated `RTT + queue wait` first; near-ties go to the nearer node.
 *
 * RTT: about 1 ms per 100 km of great-circle distance (round trip at ~2/3 c, plus routing
 * detours) plus a constant for the last mile and TLS. Queue wait: estimateQueueWaitMs below.
 */
import { NODE_FRESH_MS } from '../../../shared/src/node-row.ts'

export interface GeoPoint {
  lat: number
  lon: number
}

/** A node as the registry sees it (heartbeat row or GPU_NODES entry). */
export interface RoutableNode extends GeoPoint {
  id: string
  url: string
  region: string
  /** undefined: any model (a GPU_NODES entry without `models`). */
  models?: string[]
  maxBatch: number
  running: number
  waiting: number
  kvUsedFrac: number
  tokPerSec: number
  /** Prompt tokens/s it prefills (heartbeat, optional): prices a cache miss in affinity-route.ts. */
  prefillTokPerSec?: number
  /** Share of recent prompt tokens served from its prefix cache, 0..1 (heartbeat, optional; shown in /v1/regions). */
  prefixHitRate?: number
  draining: boolean
  /** Heartbeat epoch ms; undefined for a static entry, which never goes stale. */
  ts?: number
  /** Marked down in this isolate until this epoch ms (after a failed attempt). */
  downUntilMs?: number
  /** The mark-down is for an overloaded answer: the node is full, not failed (node-registry.ts). */
  busy?: boolean
  source: 'registry' | 'static'
}

export interface RankedNode extends RoutableNode {
  distanceKm: number
  rttMs: number
  queueWaitMs: number
  costMs: number
}

/** A heartbeat older than this is stale. */
export const FRESH_MS = NODE_FRESH_MS
export const BASE_RTT_MS = 5
export const RTT_MS_PER_KM = 1 / 100
/** Costs this close count as a tie: the nearer node wins (less jitter, no cross-ocean hops for ~nothing). */
export const NEAR_TIE_MS = 5
/** Tokens a waiting request is assumed to need, for the queue estimate. */
export const TOKENS_PER_WAITING_REQUEST = 128
/** Queue wait per waiting request when the node reports no throughput yet. */
export const WAIT_MS_PER_REQUEST_WITHOUT_RATE = 100
/** Prompt tokens/s assumed for a node that publishes no prefill rate (affinity-route.ts uses the same figure). */
export const DEFAULT_PREFILL_TOK_PER_SEC = 10_000
const EARTH_RADIUS_KM = 6371

/** Whether a node may take a new request now (any model). */
export function isUsable(node: RoutableNode, nowMs: number): boolean {
  if (node.downUntilMs !== undefined && node.downUntilMs > nowMs) return false
  return isServing(node, nowMs)
}

/** Fresh and not draining, whether or not this isolate marked it down for a few seconds. */
export function isServing(node: RoutableNode, nowMs: number): boolean {
  if (node.draining) return false
  return node.ts === undefined || nowMs - node.ts < FRESH_MS
}

/**
 * When no node can take a request because every serving one answered overloaded a moment ago:
 * ms until the first of them is asked again (its own retry hint), for an honest 503/529 with
 * retry-after-ms. undefined when some node is down for a failure or none serves the model.
 */
export function allBusyForMs(nodes: readonly RoutableNode[], model: string, nowMs: number): number | undefined {
  let soonest: number | undefined
  for (const n of nodes) {
    if (!servesModel(n, model) || !isServing(n, nowMs)) continue
    if (!n.busy || n.downUntilMs === undefined || n.downUntilMs <= nowMs) return undefined
    soonest = Math.min(soonest ?? Infinity, n.downUntilMs - nowMs)
  }
  return soonest === undefined ? undefined : Math.max(1, Math.ceil(soonest))
}

/** Whether the node lists the model; a static node without `models` may serve any. */
export function servesModel(node: RoutableNode, model: string): boolean {
  return node.models === undefined || node.models.includes(model)
}

/** Usable nodes serving `model`, best first. */
export function pickNodes(nodes: readonly RoutableNode[], model: string, client: GeoPoint, nowMs: number): RankedNode[] {
  const pool = nodes.filter((n) => isUsable(n, nowMs) && servesModel(n, model)).map((n) => estimate(n, client, nowMs))
  const ranked: RankedNode[] = []
  while (pool.length > 0) {
    const best = Math.min(...pool.map((n) => n.costMs))
    let pick = -1
    for (let i = 0; i < pool.length; i++) {
      const n = pool[i]!
      if (n.costMs - best > NEAR_TIE_MS) continue
      if (pick < 0 || n.distanceKm < pool[pick]!.distanceKm || (n.distanceKm === pool[pick]!.distanceKm && n.costMs < pool[pick]!.costMs)) pick = i
    }
    ranked.push(pool.splice(pick, 1)[0]!)
  }
  return ranked
}

function estimate(node: RoutableNode, client: GeoPoint, nowMs: number): RankedNode {
  const distanceKm = greatCircleKm(client, node)
  const rttMs = BASE_RTT_MS + distanceKm * RTT_MS_PER_KM
  const queueWaitMs = estimateQueueWaitMs(node, node.ts === undefined ? 0 : Math.max(0, nowMs - node.ts))
  // One literal of one shape, every field named (absent ones undefined). `{ ...node, … }` added
  // the estimates property by property after the spread (~1 µs each on Node 20's V8), and
  // Object.assign({}, node, …) copied through V8's generic SetDataProperties: ~4,100
  // instructions per ranked node per request under callgrind. `AllFields` makes a field added to
  // RoutableNode a type error here until it is copied.
  const ranked: AllFields<RankedNode> = {
    id: node.id,
    url: node.url,
    region: node.region,
    lat: node.lat,
    lon: node.lon,
    models: node.models,
    maxBatch: node.maxBatch,
    running: node.running,
    waiting: node.waiting,
    kvUsedFrac: node.kvUsedFrac,
    tokPerSec: node.tokPerSec,
    prefillTokPerSec: node.prefillTokPerSec,
    prefixHitRate: node.prefixHitRate,
    draining: node.draining,
    ts: node.ts,
    downUntilMs: node.downUntilMs,
    busy: node.busy,
    source: node.source,
    distanceKm,
    rttMs,
    queueWaitMs,
    costMs: rttMs + queueWaitMs,
  }
  return ranked
}

/** Every field of T present, optional ones as `undefined` when absent. */
type AllFields<T> = { [K in keyof Required<T>]: T[K] }

/**
 * How long a new request would wait on this node before its prefill starts, from its heartbeat
 * row (`ageMs` old). Continuous batching admits a waiting request as soon as the batch has a free
 * slot, so the row's `waiting` splits in two (edge/README.md, "The queue estimate"):
 * - requests that fit the free slots (maxBatch − running) are only queued behind the prefill
 *   chunk, one after another: they delay a new request by their prompts' prefill
 *   (TOKENS_PER_WAITING_REQUEST each at the node's prefill rate), work the node has done
 *   meanwhile: the row's age is taken off it;
 * - requests beyond the free slots wait for running ones to finish: TOKENS_PER_WAITING_REQUEST
 *   generated tokens each at the node's aggregate tokens/s, not aged (a full batch stays full
 *   while load keeps arriving, and the next row says so).
 * Dividing every waiting request by the generated tokens/s instead, as this did, priced a burst
 * that had just moved onto a neighbour region at seconds (during a burst's prefill a node
 * generates almost nothing) and sent a region's failover traffic one region further.
 * A node without maxBatch (a static GPU_NODES entry) counts every waiting request as blocked.
 */
export function estimateQueueWaitMs(node: Pick<RoutableNode, 'waiting' | 'running' | 'maxBatch' | 'tokPerSec' | 'prefillTokPerSec'>, ageMs = 0): number {
  if (node.waiting <= 0) return 0
  const freeSlots = node.maxBatch > 0 ? Math.max(0, node.maxBatch - node.running) : 0
  const admitted = Math.min(node.waiting, freeSlots)
  const blocked = node.waiting - admitted
  const prefillMs = Math.max(0, ((admitted * TOKENS_PER_WAITING_REQUEST) / (node.prefillTokPerSec || DEFAULT_PREFILL_TOK_PER_SEC)) * 1000 - ageMs)
  if (blocked === 0) return prefillMs
  const slotMs = node.tokPerSec > 0 ? ((blocked * TOKENS_PER_WAITING_REQUEST) / node.tokPerSec) * 1000 : blocked * WAIT_MS_PER_REQUEST_WITHOUT_RATE
  return prefillMs + slotMs
}

/** Haversine distance in km. */
export function greatCircleKm(a: GeoPoint, b: GeoPoint): number {
  const rad = Math.PI / 180
  const dLat = (b.lat - a.lat) * rad
  const dLon = (b.lon - a.lon) * rad
  const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * rad) * Math.cos(b.lat * rad) * Math.sin(dLon / 2) ** 2
  return 2 * EARTH_RADIUS_KM * Math.asin(Math.min(1, Math.sqrt(h)))
}
