/**
 * What both entries build from Redis: key store, rate limiter with its failure policy, node
 * registry, latency recorder and reader, and the affinity memory whose reads ride on the
 * limiter's tokens/min calls (read-along.ts). Only the REST client class differs (Workers vs Node),
 * so each entry passes a factory; everything else is wired once, here.
 */
import type { EdgeDeps } from '../app-env.ts'
import type { EdgeConfig } from '../config.ts'
import { createRedisKeyStore, type KeyRedis, type KeyStore } from '../keys/key-store.ts'
import { createBatchingLatencyRecorder, type BatchingOptions } from '../latency/batching-recorder.ts'
import { createRedisLatencyReader, createRedisLatencyRecorder, LATENCY_READ_TIMEOUT_MS, LATENCY_WRITE_TIMEOUT_MS, type LatencyRedis } from '../latency/redis-latency-store.ts'
import { withFailurePolicy } from '../limits/rate-limiter.ts'
import { createLeasedLimitStore, DEFAULT_LEASE } from '../limits/leased-limit-store.ts'
import { createUpstashLimitStore, type UpstashRedis } from '../limits/upstash-limit-store.ts'
import { createAffinityMemory, type AffinityRedis } from '../routing/affinity-memory.ts'
import { createNodeRegistry, REGISTRY_TIMEOUT_MS, type RegistryRedis } from '../routing/node-registry.ts'
import { createReadAlong, type ScriptRedis } from './read-along.ts'
import { singleFlight } from './single-flight.ts'

/** Longest a key lookup may take before the request is answered 503 (a cached key needs none). */
export const KEY_LOOKUP_TIMEOUT_MS = 1000
/** An affinity write may take this long (in the background, after the response started): then it is dropped. */
export const AFFINITY_WRITE_TIMEOUT_MS = 2000

/** A REST client bounded by `timeoutMs` per command. */
export type RedisFactory = (timeoutMs: number) => KeyRedis & UpstashRedis & ScriptRedis & RegistryRedis & LatencyRedis & AffinityRedis

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

export interface RedisDepsOptions {
  /** Sum latency samples in memory and write them per batch (Workers: with `ownerWrites`). */
  latencyBatching?: BatchingOptions
  /**
   * Concurrent requests share Redis calls: one key lookup per API key at a time, one exact
   * rate-limit call per key at a time, one node-table load (a long-lived process only; see
   * single-flight.ts).
   */
  coalesce?: boolean
}

export function createRedisBackedDeps(config: EdgeConfig, redis: RedisFactory, options: RedisDepsOptions = {}): Pick<EdgeDeps, 'keys' | 'limiter' | 'registry' | 'latency' | 'latencyReader' | 'affinity'> {
  const latencyRedis = redis(LATENCY_WRITE_TIMEOUT_MS)
  const memory = createAffinityMemory({ ttlMs: config.affinity.ttlMs, ...(config.affinity.enabled ? { redis: redis(AFFINITY_WRITE_TIMEOUT_MS) } : {}) })
  const readAlong = createReadAlong((key, value) => memory.learn(key, value))
  const limitStore = createUpstashLimitStore(redis(config.rateLimitTimeoutMs), config.affinity.enabled ? { readAlong } : {})
  return {
    keys: options.coalesce ? coalescedLookups(createRedisKeyStore(redis(KEY_LOOKUP_TIMEOUT_MS))) : createRedisKeyStore(redis(KEY_LOOKUP_TIMEOUT_MS)),
    limiter: withFailurePolicy(createLeasedLimitStore(limitStore, { ...DEFAULT_LEASE, coalesce: options.coalesce }), {
      mode: config.rateLimitFailureMode,
      timeoutMs: config.rateLimitTimeoutMs,
    }),
    registry: createNodeRegistry({ redis: redis(REGISTRY_TIMEOUT_MS), fallback: config.gpuNodes, coalesce: options.coalesce }),
    latency: options.latencyBatching ? createBatchingLatencyRecorder(latencyRedis, options.latencyBatching) : createRedisLatencyRecorder(latencyRedis),
    latencyReader: createRedisLatencyReader(redis(LATENCY_READ_TIMEOUT_MS)),
    affinity: { memory, readAlong },
  }
}

/** A burst that finds an API key's cache entry expired makes one lookup, not one per request. */
function coalescedLookups(store: KeyStore): KeyStore {
  return { lookup: singleFlight((hashHex) => store.lookup(hashHex)) }
}
