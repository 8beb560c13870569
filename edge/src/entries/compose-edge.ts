/**
 * The edge's composition root: config and one runtime's clients → EdgeDeps, for both entries.
 * Everything Redis-backed is wired here once — key store, rate limiter with its failure policy,
 * node registry, latency recorder and reader, and the affinity memory whose reads ride on the
 * limiter's tokens/min calls (read-along.ts). What differs by runtime comes in as EdgeRuntime:
 * the REST client class (Workers vs Node), how nodes are reached, and the runtime's own
 * digest, client signal and dashboard assets.
 */
import type { Digest } from '../../../shared/src/digest.ts'
import { ResponsesStore, type ResponsesRedis } from '../../../shared/src/dialects/responses-store.ts'
import type { EdgeConfig } from '../config.ts'
import type { DashboardAssets } from '../dashboard/dashboard-assets.ts'
import type { EdgeDeps } from '../deps.ts'
import { createRedisKeyStore, type KeyRedis, type KeyStore } from '../keys/key-store.ts'
import { createBatchingLatencyRecorder, type BatchingOptions } from '../latency/batching-recorder.ts'
import { combineRecorders, type LatencyRecorder } from '../latency/latency-recorder.ts'
import { createRedisLatencyReader, createRedisLatencyRecorder, LATENCY_READ_TIMEOUT_MS, LATENCY_WRITE_TIMEOUT_MS, type LatencyRedis } from '../latency/redis-latency-store.ts'
import { withFailurePolicy } from '../limits/rate-limiter.ts'
import { createLeasedLimitStore, DEFAULT_LEASE } from '../limits/leased-limit-store.ts'
import { createUpstashLimitStore, type UpstashRedis } from '../limits/upstash-limit-store.ts'
import type { UpstreamFetch } from '../proxy/upstream-fetch.ts'
import { createReadAlong, type ScriptRedis } from '../redis/read-along.ts'
import { singleFlight } from '../redis/single-flight.ts'
import { createAffinityMemory, type AffinityRedis } from '../routing/affinity-memory.ts'
import { createNodeRegistry, REGISTRY_TIMEOUT_MS, type RegistryRedis } from '../routing/node-registry.ts'
import { createSupersedeLedger, type SupersedeRedis } from '../routing/supersede-ledger.ts'

/** Longest a key lookup may take before the request is answered 503 (a cached key needs none). */
export const KEY_LOOKUP_TIMEOUT_MS = 1000
/** A stored response's read or delete may take this long before the request is answered 504. */
export const RESPONSES_TIMEOUT_MS = 2000
/** An affinity write may take this long (in the background, after the response started): then it is dropped. */
export const AFFINITY_WRITE_TIMEOUT_MS = 2000

/** A REST client bounded by `timeoutMs` per command. */
export type RedisFactory = (timeoutMs: number) => KeyRedis & UpstashRedis & ScriptRedis & RegistryRedis & LatencyRedis & AffinityRedis & ResponsesRedis & SupersedeRedis

/** What one runtime brings to the edge. */
export interface EdgeRuntime {
  redis: RedisFactory
  /** How GPU nodes are reached (fetch on Workers; undici pools and HTTP/2 sessions on Node). */
  upstream: UpstreamFetch
  /** Sum latency samples in memory and write them per batch (Workers: with `ownerWrites`). */
  latencyBatching?: BatchingOptions
  /**
   * Concurrent requests share Redis calls: one key lookup per API key at a time, one exact
   * rate-limit call per key at a time, one node-table load (a long-lived process only; see
   * single-flight.ts).
   */
  coalesce?: boolean
  /** Also gets every latency sample (Workers Analytics Engine). */
  alsoRecord?: LatencyRecorder
  dashboardAssets?: DashboardAssets
  digest?: Digest
  clientSignal?: EdgeDeps['clientSignal']
}

/**
 * Options for every @upstash/redis client of the edge: no retries (the failure policy decides
 * at once), no auto-pipelining (on Workers it would share I/O across request contexts), no
 * telemetry, and a per-call timeout — as a function, since a fixed signal that fires turns into
 * a successful reply carrying the abort reason.
 */
export function redisClientOptions(config: EdgeConfig, timeoutMs: number) {
  return {
    url: config.upstash.url,
    token: config.upstash.token,
    retry: false as const,
    enableAutoPipelining: false,
    enableTelemetry: false,
    signal: () => AbortSignal.timeout(timeoutMs),
  }
}

export function composeEdgeDeps(config: EdgeConfig, runtime: EdgeRuntime): EdgeDeps {
  const { redis, coalesce } = runtime
  const latencyRedis = redis(LATENCY_WRITE_TIMEOUT_MS)
  const memory = createAffinityMemory({ ttlMs: config.affinity.ttlMs, ...(config.affinity.enabled ? { redis: redis(AFFINITY_WRITE_TIMEOUT_MS) } : {}) })
  const readAlong = createReadAlong((key, value) => memory.learn(key, value))
  const limitStore = createUpstashLimitStore(redis(config.rateLimitTimeoutMs), config.affinity.enabled ? { readAlong } : {})
  const keys = createRedisKeyStore(redis(KEY_LOOKUP_TIMEOUT_MS))
  const latency = runtime.latencyBatching ? createBatchingLatencyRecorder(latencyRedis, runtime.latencyBatching) : createRedisLatencyRecorder(latencyRedis)
  return {
    config,
    keys: coalesce ? coalescedLookups(keys) : keys,
    limiter: withFailurePolicy(createLeasedLimitStore(limitStore, { ...DEFAULT_LEASE, coalesce }), {
      mode: config.rateLimitFailureMode,
      timeoutMs: config.rateLimitTimeoutMs,
    }),
    registry: createNodeRegistry({ redis: redis(REGISTRY_TIMEOUT_MS), fallback: config.gpuNodes, coalesce }),
    upstream: runtime.upstream,
    latency: combineRecorders(latency, runtime.alsoRecord),
    latencyReader: createRedisLatencyReader(redis(LATENCY_READ_TIMEOUT_MS)),
    responses: new ResponsesStore(redis(RESPONSES_TIMEOUT_MS)),
    supersede: createSupersedeLedger(redis(AFFINITY_WRITE_TIMEOUT_MS)),
    affinity: { memory, readAlong },
    ...(runtime.dashboardAssets ? { dashboardAssets: runtime.dashboardAssets } : {}),
    ...(runtime.digest ? { digest: runtime.digest } : {}),
    ...(runtime.clientSignal ? { clientSignal: runtime.clientSignal } : {}),
  }
}

/** A burst that finds an API key's cache entry expired makes one lookup, not one per request. */
function coalescedLookups(store: KeyStore): KeyStore {
  return { lookup: singleFlight((hashHex) => store.lookup(hashHex)) }
}
