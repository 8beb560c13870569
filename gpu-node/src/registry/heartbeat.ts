/**
 * Registry heartbeat (DESIGN.md §5): every second this node writes its row into the Redis hash
 * `zl:nodes`, so edges can route to it while `now - ts < 5000`. On stop it removes the row.
 * A failing Redis must never take the node down: failures are logged (rate-limited, without
 * URL or token) and the next beat simply tries again.
 */
import { createNodeRedis } from '../node-redis.ts'
import { NODES_KEY, type NodeRow } from '../../../shared/src/node-row.ts'
import type { EngineStats } from '../engine/types.ts'

export { NODES_KEY }
import type { Logger } from '../server/json-log.ts'

const BEAT_INTERVAL_MS = 1000
/** One Redis call may not outlive the beat after it. */
const REDIS_TIMEOUT_MS = 2000
/** At most one "heartbeat failing" log line per this many ms. */
const FAILURE_LOG_INTERVAL_MS = 30_000

/** The two commands the heartbeat needs; @upstash/redis satisfies it, tests pass a fake. */
export interface RegistryClient {
  hset(key: string, fields: Record<string, string>): Promise<unknown>
  hdel(key: string, ...fields: string[]): Promise<unknown>
}

export interface HeartbeatOptions {
  client: RegistryClient
  node: { id: string; url: string; region: string; lat: number; lon: number; models: string[] }
  stats: () => EngineStats
  /** True once the node started draining, even before the engine reports it. */
  isDraining: () => boolean
  log: Logger
  intervalMs?: number
  now?: () => number
}

export interface Heartbeat {
  /** Writes one row now (also used to announce draining without waiting for the next tick). */
  beat(): Promise<void>
  /** Stops the timer, waits for an in-flight write, then HDELs the row. Never throws. */
  stop(): Promise<void>
}

/** A Redis client for the heartbeat: one call may not outlive the beat after it. */
export function createUpstashRegistryClient(url: string, token: string): RegistryClient {
  return createNodeRedis({ url, token }, REDIS_TIMEOUT_MS)
}

export function startHeartbeat(opts: HeartbeatOptions): Heartbeat {
  const now = opts.now ?? Date.now
  let inFlight: Promise<void> | undefined
  let stopped = false
  let failing = false
  let lastFailureLogMs = -Infinity

  const hitRate = new HitRateWindow(HIT_RATE_WINDOW_MS)
  const row = (): NodeRow => {
    const s = opts.stats()
    const t = now()
    const rate = s.prefixCache ? hitRate.add(t, s.prefixCache.queries, s.prefixCache.hits) : undefined
    return {
      ...opts.node,
      maxBatch: s.maxBatch,
      running: s.running,
      waiting: s.waiting,
      kvUsedFrac: s.kvUsedFrac,
      tokPerSec: s.tokPerSec,
      // For the edge's cache-affine routing (edge/README.md): what a cached prefix is worth in time here, and how often prompts hit.
      ...(s.prefillTokPerSec > 0 ? { prefillTokPerSec: Math.round(s.prefillTokPerSec) } : {}),
      ...(rate !== undefined ? { prefixHitRate: Math.round(rate * 1000) / 1000 } : {}),
      draining: s.draining || opts.isDraining(),
      ts: t,
    }
  }

  const onFailure = (op: string, e: unknown) => {
    const t = now()
    if (!failing || t - lastFailureLogMs >= FAILURE_LOG_INTERVAL_MS) {
      // The error's name and system code only: upstash messages can echo the request URL.
      opts.log.warn({ msg: 'heartbeat failed', op, error: e instanceof Error ? e.name : 'unknown', code: causeCode(e) })
      lastFailureLogMs = t
    }
    failing = true
  }

  /** Never rejects: every failure (Redis, or reading stats) is logged and the next beat retries. */
  const attempt = async (): Promise<void> => {
    try {
      await opts.client.hset(NODES_KEY, { [opts.node.id]: JSON.stringify(row()) })
      if (failing) opts.log.info({ msg: 'heartbeat recovered' })
      failing = false
    } catch (e) {
      onFailure('hset', e)
    }
  }

  const write = (): Promise<void> => {
    const done: Promise<void> = attempt().finally(() => {
      if (inFlight === done) inFlight = undefined
    })
    inFlight = done
    return done
  }

  /** Timer ticks skip while a write is in flight: a slow Redis must not pile writes up. */
  const tick = () => {
    if (!stopped && !inFlight) void write()
  }

  /** An explicit beat writes the state as of now, after any write in flight. */
  const beat = async (): Promise<void> => {
    await inFlight
    if (!stopped) await write()
  }

  const timer = setInterval(tick, opts.intervalMs ?? BEAT_INTERVAL_MS)
  timer.unref()
  tick()

  return {
    beat,
    async stop() {
      if (stopped) return
      stopped = true
      clearInterval(timer)
      await inFlight
      try {
        await opts.client.hdel(NODES_KEY, opts.node.id)
      } catch (e) {
        onFailure('hdel', e)
      }
    },
  }
}

/** e.g. ECONNREFUSED from fetch's `cause`: says what went wrong without any URL or token. */
function causeCode(e: unknown): string | undefined {
  const cause = e instanceof Error ? (e.cause as { code?: unknown } | undefined) : undefined
  return typeof cause?.code === 'string' ? cause.code : undefined
}

/** The prefix-cache hit rate the heartbeat reports: prompt tokens hit ÷ looked up, over about this long. */
export const HIT_RATE_WINDOW_MS = 60_000

/**
 * Hits ÷ queries between the oldest sample within the window and now, from the engine's
 * cumulative counts; the last rate seen while no prompt arrives; 0 before any.
 */
export class HitRateWindow {
  private readonly samples: Array<{ t: number; queries: number; hits: number }> = []
  private last = 0

  constructor(private readonly windowMs: number) {}

  add(t: number, queries: number, hits: number): number {
    this.samples.push({ t, queries, hits })
    while (this.samples.length > 2 && t - this.samples[1]!.t >= this.windowMs) this.samples.shift()
    const oldest = this.samples[0]!
    const dq = queries - oldest.queries
    if (dq > 0) this.last = (hits - oldest.hits) / dq
    else if (this.samples.length === 1 && queries > 0) this.last = hits / queries
    return this.last
  }
}
