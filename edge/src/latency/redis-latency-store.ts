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

/**
 * Hashes whose lifetime a writer has set (a batching recorder keeps one per isolate or process):
 * their EXPIRE is left out of later pipelines. A hash's TTL is set by its first write, which
 * comes after its minute (hour) began, so it outlives every window that reads it however often
 * it is written afterwards. Cleared when it holds MAX_KNOWN_TTLS: a forgotten hash costs one EXPIRE.
 */
export type KnownTtls = Set<string>
export const MAX_KNOWN_TTLS = 4096

/**
 * One pipeline: HINCRBY per distinct field, and EXPIRE per hash unless `known` says this writer
 * set it already. Then, for such a hash, if every HINCRBY answered exactly its increment the
 * hash may have been created again (deleted or evicted since): its EXPIRE follows in a second
 * pipeline, so no hash is ever left without a lifetime. (An old hash that only got new fields
 * looks the same and costs that second pipeline too; each write carries an outcome field the
 * hash almost always has already.)
 */
export async function writeBatch(redis: LatencyRedis, batch: IncrementBatch, known?: KnownTtls): Promise<void> {
  const pipe = redis.pipeline()
  const skipped = new Set<string>()
  for (const [key, { ttlSeconds, fields }] of batch) {
    for (const [field, n] of fields) pipe.hincrby(key, field, n)
    if (known?.has(key)) skipped.add(key)
    else pipe.expire(key, ttlSeconds)
  }
  const replies = await pipe.exec()
  if (!known) return
  if (known.size + batch.size > MAX_KNOWN_TTLS) known.clear()
  const again: Array<[string, number]> = []
  let i = 0
  for (const [key, { ttlSeconds, fields }] of batch) {
    let created = true
    for (const n of fields.values()) {
      const got = Number(replies[i++])
      // An answer that is not a number proves nothing: the hash is treated as new.
      if (Number.isFinite(got) && got !== n) created = false
    }
    if (!skipped.has(key)) i++ // its EXPIRE's answer
    else if (created) again.push([key, ttlSeconds])
    known.add(key)
  }
  if (again.length === 0) return
  const expire = redis.pipeline()
  for (const [key, ttlSeconds] of again) expire.expire(key, ttlSeconds)
  await expire.exec()
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
