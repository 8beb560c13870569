/**
 * The latency histograms in Redis (key scheme: latency-keys.ts). Writing is ONE pipelined
 * request per sample (a dozen HINCRBY/EXPIRE); reading is one pipelined HGETALL per minute (or
 * hour) of the window.
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

export function createRedisLatencyRecorder(redis: LatencyRedis): LatencyRecorder {
  return {
    async record(s: LatencySample) {
      const pipe = redis.pipeline()
      const scopes: StatsScope[] = s.tenant === undefined ? [{ kind: 'all' }] : [{ kind: 'all' }, { kind: 'tenant', tenant: s.tenant }]
      for (const resolution of Object.keys(RESOLUTIONS) as Resolution[]) {
        const bucket = bucketOf(resolution, s.endedAtMs)
        for (const scope of scopes) {
          const key = latencyKey(resolution, bucket, scope)
          pipe.hincrby(key, fieldName(s.edge, s.nodeRegion, { kind: 'outcome', outcome: s.outcome }), 1)
          if (s.ttfbMs !== undefined) pipe.hincrby(key, fieldName(s.edge, s.nodeRegion, { kind: 'ttfb', bucket: bucketIndex(s.ttfbMs) }), 1)
          pipe.hincrby(key, fieldName(s.edge, s.nodeRegion, { kind: 'total', bucket: bucketIndex(s.totalMs) }), 1)
          pipe.expire(key, RESOLUTIONS[resolution].ttlSeconds)
        }
      }
      await pipe.exec()
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
