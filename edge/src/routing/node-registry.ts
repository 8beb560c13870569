/**
 * The GPU node table as this isolate sees it (DESIGN.md §5): the `zl:nodes` hash that nodes
 * heartbeat into, cached for 1 s and refreshed in the background (a request never waits for a
 * refresh, only the isolate's very first one waits for the first read). When Redis cannot be
 * read, or holds no fresh row, the static GPU_NODES table stands in. Nodes that failed an
 * attempt are marked down here for 10 s.
 *
 * Cross-request rule (Workers): only plain data is shared between requests; a refresh promise
 * is awaited by nobody but the request that started it (through waitUntil). A request that finds
 * the table too old while another request's load is on its way waits for that table on its own
 * timer (within.ts pollFor) before loading one itself: a burst after an idle spell made one
 * HGETALL per request on Workers (64 for a burst of 64), one in all now.
 */
import { NodeRow, NODES_KEY } from '../../../shared/src/node-row.ts'
import type { StaticNode } from '../config.ts'
import { pollFor, TIMED_OUT, within } from '../within.ts'
import { FRESH_MS, type RoutableNode } from './pick-node.ts'
import type { Background } from '../context.ts'

export { NODES_KEY }
export const TABLE_CACHE_MS = 1000
/** A cached table older than this is not served: its rows would be near the 5 s freshness limit. */
export const MAX_TABLE_AGE_MS = 3000
export const MARK_DOWN_MS = 10_000
/** Longest a read of the table may take (the first request of an isolate waits for it). */
export const REGISTRY_TIMEOUT_MS = 1000
/** A load not answered in this long (twice its timeout) no longer holds back the next. */
const LOAD_LOST_MS = 2 * REGISTRY_TIMEOUT_MS

export interface NodeTable {
  nodes: RoutableNode[]
  source: 'registry' | 'static'
  /** Epoch ms of the read this table came from. */
  fetchedAtMs: number
  /** Why the static table is in use, when it is. */
  fallbackReason?: 'registry_unreachable' | 'registry_empty'
}

export interface NodeRegistry {
  /** The current table (nodes annotated with downUntilMs); starts a background refresh when older than 1 s. */
  table(waitUntil?: Background): Promise<NodeTable>
  /**
   * After a failed attempt: skip this node in this isolate for MARK_DOWN_MS. A node that answered
   * overloaded (`busyForMs`: its retry hint) is healthy, only full: it is skipped for that long (at
   * most MARK_DOWN_MS) and annotated `busy`, so a request that finds every node full is told so.
   */
  markDown(nodeId: string, busyForMs?: number): void
}

/** The one Redis command the registry needs; @upstash/redis satisfies it. */
export interface RegistryRedis {
  hgetall(key: string): Promise<Record<string, unknown> | null>
}

export interface NodeRegistryOptions {
  redis: RegistryRedis
  fallback: readonly StaticNode[]
  now?: () => number
  timeoutMs?: number
  /** The registry hash; NODES_KEY except in tests that must not disturb each other. */
  nodesKey?: string
  /**
   * Requests that must wait for a table share one load (a long-lived process: the Node entry).
   * Off on Workers, where a promise started by one request's I/O context cannot be relied on from
   * another (redis/single-flight.ts): a waiting request watches for the table that load stores
   * (plain data, its own timer), and loads for itself if none came.
   */
  coalesce?: boolean
}

export function createNodeRegistry(opts: NodeRegistryOptions): NodeRegistry {
  const now = opts.now ?? Date.now
  const fallback = opts.fallback.map(fromStatic)
  const down = new Map<string, { until: number; busy: boolean }>()
  let cached: NodeTable | undefined

  const load = async (): Promise<NodeTable> => {
    const result = await within(opts.timeoutMs ?? REGISTRY_TIMEOUT_MS, () => opts.redis.hgetall(opts.nodesKey ?? NODES_KEY))
    const t = now()
    if (result === TIMED_OUT || result instanceof Error) return { nodes: fallback, source: 'static', fetchedAtMs: t, fallbackReason: 'registry_unreachable' }
    const rows = parseRows(result)
    if (!rows.some((r) => r.ts !== undefined && t - r.ts < FRESH_MS)) return { nodes: fallback, source: 'static', fetchedAtMs: t, fallbackReason: 'registry_empty' }
    return { nodes: rows, source: 'registry', fetchedAtMs: t }
  }

  const annotate = (table: NodeTable): NodeTable => {
    // The common case, on every request: nothing is marked down, the table is used as is.
    if (down.size === 0) return table
    const t = now()
    const nodes = table.nodes.map((n) => {
      const mark = down.get(n.id)
      if (mark === undefined) return n
      if (mark.until <= t) {
        down.delete(n.id)
        return n
      }
      return Object.assign({}, n, mark.busy ? { downUntilMs: mark.until, busy: true } : { downUntilMs: mark.until })
    })
    return Object.assign({}, table, { nodes })
  }

  const fetchTable = (): Promise<NodeTable> => load().then((table) => (cached = table))
  const usable = (table: NodeTable | undefined): table is NodeTable => table !== undefined && now() - table.fetchedAtMs < MAX_TABLE_AGE_MS
  /** The load in flight, if any: one background refresh at a time, and (coalesce) what waiters share. */
  let inflight: Promise<NodeTable> | undefined
  let loadingSinceMs = 0
  /** A load is on its way; one unanswered after LOAD_LOST_MS is taken as lost (on Workers its request may be gone). */
  const loading = () => inflight !== undefined && now() - loadingSinceMs < LOAD_LOST_MS
  const reload = (): Promise<NodeTable> => {
    if (inflight && loading()) return inflight
    loadingSinceMs = now()
    const mine: Promise<NodeTable> = fetchTable().finally(() => {
      if (inflight === mine) inflight = undefined
    })
    return (inflight = mine)
  }

  return {
    async table(waitUntil) {
      // No table, or one so old that its heartbeats would all read as stale (an isolate that sat
      // idle): wait for a fresh one rather than route on it.
      if (!usable(cached)) {
        if (opts.coalesce || !loading()) return annotate(await reload())
        return annotate((await pollFor(() => (usable(cached) ? cached : undefined), loading, REGISTRY_TIMEOUT_MS)) ?? (await fetchTable()))
      }
      if (now() - cached.fetchedAtMs >= TABLE_CACHE_MS && !loading()) {
        const refresh = reload()
        if (waitUntil) waitUntil(refresh)
      }
      return annotate(cached)
    },
    markDown(nodeId, busyForMs) {
      down.set(nodeId, { until: now() + Math.min(busyForMs ?? MARK_DOWN_MS, MARK_DOWN_MS), busy: busyForMs !== undefined })
    },
  }
}

/** Heartbeat rows → nodes; rows that do not parse are skipped (a broken node must not break routing). */
export function parseRows(hash: Record<string, unknown> | null): RoutableNode[] {
  const out: RoutableNode[] = []
  for (const value of Object.values(hash ?? {})) {
    // @upstash/redis deserializes JSON values by default; a raw client hands over the string.
    let row: unknown = value
    if (typeof value === 'string') {
      try {
        row = JSON.parse(value)
      } catch {
        continue
      }
    }
    const parsed = NodeRow.safeParse(row)
    if (parsed.success) out.push({ ...parsed.data, source: 'registry' })
  }
  return out.sort((a, b) => a.id.localeCompare(b.id))
}

function fromStatic(n: StaticNode): RoutableNode {
  return {
    id: n.id,
    url: n.url,
    region: n.region,
    lat: n.lat,
    lon: n.lon,
    ...(n.models ? { models: n.models } : {}),
    maxBatch: 0,
    running: 0,
    waiting: 0,
    kvUsedFrac: 0,
    tokPerSec: 0,
    draining: false,
    source: 'static',
  }
}
