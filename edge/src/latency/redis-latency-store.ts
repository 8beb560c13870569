/**
 * The latency histograms in Redis (key scheme: latency-keys.ts). Writing is ONE pipelined
 * request per batch of samples (batching-recorder.ts, both entries), or per sample (a dozen
 * HINCRBY/EXPIRE; tests and tools); reading is one pipelined HGETALL per minute (or hour) of the
 * window.
 */
import { bucketIndex } from './histogram.ts'
import { bucketOf, fieldName, latencyKey, RESOLUTIONS, type Resolution, type StatsScope } from './latency-keys.ts'
import type { LatencyRecorder, LatencySample } from './latency-recorder.ts'

/** A sample's write may take this long (in waitUntil, after the response): then it is dropped. */
export const LATENCY_WRITE_TIMEOUT_MS = 2000
/** A stats read may take this long before /v1/stats/latency answers 503. */
export const LATENCY_READ_TIMEOUT_MS = 3000

/** The pipeline commands the store uses; @upstash/redis's `pipeline()` satisfies it. */
export interface LatencyPipeline {
  hincrby(key: string, field: string, increment: number): unknown
  expire(key: string, seconds: number): unknown
  hgetall(key: string): unknown
  exec(): Promise<unknown[]>
}

export interface LatencyRedis {
  pipeline(): LatencyPipeline
}

/** One stored hash: field → count (Upstash returns numbers; a raw client strings). */
export type LatencyHash = Record<string, unknown> | null

export interface LatencyReader {
  /** The hashes of buckets first..last (inclusive, oldest first); null where none was written. */
  read(scope: StatsScope, resolution: Resolution, first: number, last: number): Promise<LatencyHash[]>
}

/** The histogram fields one sample increments, per hash key, and how long each hash lives (s). */
export function sampleIncrements(s: LatencySample, add: (key: string, field: string, ttlSeconds: number) => void): void {
  const scopes: StatsScope[] = s.tenant === undefined ? [{ kind: 'all' }] : [{ kind: 'all' }, { kind: 'tenant', tenant: s.tenant }]
  // The same fields go into every hash (minute and hour, all and tenant): named once.
  const fields = [
    fieldName(s.edge, s.nodeRegion, { kind: 'outcome', outcome: s.outcome }),
    ...(s.ttfbMs !== undefined ? [fieldName(s.edge, s.nodeRegion, { kind: 'ttfb', bucket: bucketIndex(s.ttfbMs) })] : []),
    fieldName(s.edge, s.nodeRegion, { kind: 'total', bucket: bucketIndex(s.totalMs) }),
  ]
  for (const resolution of Object.keys(RESOLUTIONS) as Resolution[]) {
    const bucket = bucketOf(resolution, s.endedAtMs)
    const ttl = RESOLUTIONS[resolution].ttlSeconds
    for (const scope of scopes) {
      const key = latencyKey(resolution, bucket, scope)
      for (const field of fields) add(key, field, ttl)
    }
  }
}

/** Field increments per hash key, with each hash's lifetime: what one pipeline writes. */
export type IncrementBatch = Map<string, { ttlSeconds: number; fields: Map<string, number> }>

export function addToBatch(batch: IncrementBatch, key: string, field: string, ttlSeconds: number, n = 1): void {
  let hash = batch.get(key)
  if (!hash) batch.set(key, (hash = { ttlSeconds, fields: new Map() }))
  hash.fields.set(field, (hash.fields.get(field) ?? 0) + n)
}

/** One pipeline: HINCRBY per distinct field, one EXPIRE per hash. */
export async function writeBatch(redis: LatencyRedis, batch: IncrementBatch): Promise<void> {
  const pipe = redis.pipeline()
  for (const [key, { ttlSeconds, fields }] of batch) {
    for (const [field, n] of fields) pipe.hincrby(key, field, n)
    pipe.expire(key, ttlSeconds)
  }
  await pipe.exec()
}

/** One pipelined write per sample: no entry uses it any more (both batch); tests and tools do. */
export function createRedisLatencyRecorder(redis: LatencyRedis): LatencyRecorder {
  return {
    async record(s: LatencySample) {
      const batch: IncrementBatch = new Map()
      sampleIncrements(s, (key, field, ttl) => addToBatch(batch, key, field, ttl))
      await writeBatch(redis, batch)
    },
  }
}

export function createRedisLatencyReader(redis: LatencyRedis): LatencyReader {
  return {
    async read(scope, resolution, first, last) {
      if (last < first) return []
      const pipe = redis.pipeline()
      for (let b = first; b <= last; b++) pipe.hgetall(latencyKey(resolution, b, scope))
      const rows = await pipe.exec()
      return rows.map((r) => (r && typeof r === 'object' ? (r as Record<string, unknown>) : null))
    },
  }
}
