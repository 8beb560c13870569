/**
 * The batching recorder writes exactly what the per-request recorder writes, in far fewer
 * pipelines: both over real redis-servers behind the local Upstash bridge (one each, so their
 * hashes can be compared key by key).
 */
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { createBatchingLatencyRecorder, LatencyBatchError } from './batching-recorder.ts'
import { bucketOf, LATENCY_KEY_PREFIX, latencyKey } from './latency-keys.ts'
import type { LatencySample } from './latency-recorder.ts'
import { createRedisLatencyRecorder, type LatencyRedis } from './redis-latency-store.ts'

let ups: LocalUpstash[] = []
beforeAll(async () => {
  ups = await Promise.all([startLocalUpstash(), startLocalUpstash()])
})
afterAll(async () => {
  await Promise.all(ups.map((u) => u.stop()))
})

const client = (up: LocalUpstash) => new Redis({ url: up.restUrl, token: up.restToken, enableTelemetry: false, enableAutoPipelining: false })

/** Counts the pipelines a recorder sends, and their EXPIREs. */
function countingPipelines(redis: LatencyRedis): LatencyRedis & { execs: number; expires: number } {
  const c = {
    execs: 0,
    expires: 0,
    pipeline() {
      const p = redis.pipeline()
      const exec = p.exec.bind(p)
      const expire = p.expire.bind(p)
      p.exec = () => (c.execs++, exec())
      p.expire = (key, seconds) => (c.expires++, expire(key, seconds))
      return p
    },
  }
  return c
}

function sampleAt(i: number, now: number): LatencySample {
  return {
    requestId: `r${i}`,
    endedAtMs: now + (i % 3) * 60_000, // three minutes
    edge: i % 2 ? 'fra' : 'iad',
    ...(i % 5 ? { nodeRegion: i % 2 ? 'eu-west' : 'us-east' } : {}),
    ...(i % 4 ? { model: 'tiny' } : {}),
    ...(i % 7 ? { tenant: `t${i % 3}` } : {}),
    status: i % 6 ? 200 : 429,
    outcome: i % 6 ? 'ok' : 'rate_limited',
    ...(i % 5 ? { ttfbMs: 1 + (i * 37) % 900 } : {}),
    totalMs: 5 + (i * 91) % 20_000,
    failovers: 0,
  }
}

async function dump(redis: Redis): Promise<Record<string, Record<string, unknown>>> {
  const out: Record<string, Record<string, unknown>> = {}
  for (const key of (await redis.keys(`${LATENCY_KEY_PREFIX}:*`)).sort()) {
    out[key] = (await redis.hgetall(key)) ?? {}
    expect(await redis.ttl(key)).toBeGreaterThan(3600)
  }
  return out
}

describe('batching latency recorder', () => {
  it('stores the same histograms as one write per sample, in one pipeline per batch', async () => {
    const [a, b] = [client(ups[0]!), client(ups[1]!)]
    const perSample = countingPipelines(a)
    const batched = countingPipelines(b)
    const direct = createRedisLatencyRecorder(perSample)
    const batching = createBatchingLatencyRecorder(batched, { flushMs: 60_000, maxSamples: 100 })
    const now = Date.now()
    const n = 250
    const writes: Promise<void>[] = []
    for (let i = 0; i < n; i++) {
      writes.push(direct.record(sampleAt(i, now)))
      writes.push(batching.record(sampleAt(i, now)))
    }
    // Two full batches went out at once; the last 50 samples wait for the timer, so the test
    // checks the full batches first, then closes the last one by filling it.
    await Promise.all(writes.slice(0, 400))
    expect(batched.execs).toBe(2)
    for (let i = n; i < n + 50; i++) {
      writes.push(direct.record(sampleAt(i, now)))
      writes.push(batching.record(sampleAt(i, now)))
    }
    await Promise.all(writes)
    expect(perSample.execs).toBe(n + 50)
    expect(batched.execs).toBe(3)
    const [got, want] = [await dump(b), await dump(a)]
    expect(Object.keys(want).length).toBeGreaterThan(6)
    expect(got).toEqual(want)
  })

  it('writes a partial batch after flushMs, and keeps no timer when idle', async () => {
    const redis = countingPipelines(client(ups[1]!))
    const recorder = createBatchingLatencyRecorder(redis, { flushMs: 20, maxSamples: 1000 })
    const started = Date.now()
    await Promise.all([recorder.record(sampleAt(1, started)), recorder.record(sampleAt(2, started))])
    expect(Date.now() - started).toBeGreaterThanOrEqual(15)
    expect(redis.execs).toBe(1)
    // A later sample opens a new batch.
    await recorder.record(sampleAt(3, started))
    expect(redis.execs).toBe(2)
  })

  it('sends a hash its EXPIRE once, and again when the hash was deleted since', async () => {
    const raw = client(ups[1]!)
    const redis = countingPipelines(raw)
    const recorder = createBatchingLatencyRecorder(redis, { flushMs: 60_000, maxSamples: 1000 })
    const tenant = `ttl-${Date.now()}`
    const at = Date.now()
    const write = async (i: number) => {
      void recorder.record({ ...sampleAt(i, at), endedAtMs: at, tenant })
      await recorder.flush!()
    }
    await write(1)
    // Four hashes (minute and hour, all and tenant), one EXPIRE each.
    expect([redis.execs, redis.expires]).toEqual([1, 4])
    // The same fields again (an isolate's edge and regions repeat): no EXPIRE.
    await write(1)
    expect([redis.execs, redis.expires]).toEqual([2, 4])
    // Gone (evicted, deleted): HINCRBY creates it again without a TTL, and its answers show it.
    const minuteKey = latencyKey('minute', bucketOf('minute', at), { kind: 'tenant', tenant })
    await raw.del(minuteKey)
    await write(1)
    expect([redis.execs, redis.expires]).toEqual([4, 5])
    expect(await raw.ttl(minuteKey)).toBeGreaterThan(3600)
    expect(await raw.hgetall(minuteKey)).not.toBeNull()
  })

  it("fails the batch's opener with the count of samples lost, once; the others resolve at once", async () => {
    const broken: LatencyRedis = { pipeline: () => ({ hincrby: () => {}, expire: () => {}, hgetall: () => {}, exec: () => Promise.reject(new Error('ECONNREFUSED')) }) }
    const recorder = createBatchingLatencyRecorder(broken, { flushMs: 5, maxSamples: 1000 })
    const records = [1, 2, 3].map((i) => recorder.record(sampleAt(i, Date.now())))
    const results = await Promise.allSettled(records)
    expect(results.map((r) => r.status)).toEqual(['rejected', 'fulfilled', 'fulfilled'])
    const reason = (results[0] as PromiseRejectedResult).reason as LatencyBatchError
    expect(reason).toBeInstanceOf(LatencyBatchError)
    expect(reason.samples).toBe(3)
  })

  it('holds one pending promise per batch, not one per sample', async () => {
    const redis = countingPipelines(client(ups[1]!))
    const recorder = createBatchingLatencyRecorder(redis, { flushMs: 60_000, maxSamples: 1000 })
    let settled = 0
    const at = Date.now()
    const records = Array.from({ length: 50 }, (_, i) => recorder.record(sampleAt(i, at)).then(() => void settled++))
    // Every sample but the opener's is settled before the batch is written…
    await Promise.all(records.slice(1))
    expect([settled, redis.execs]).toEqual([49, 0])
    // …and the opener's is the write.
    await recorder.flush!()
    await records[0]
    expect([settled, redis.execs]).toEqual([50, 1])
  })
})
