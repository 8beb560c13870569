import { describe, expect, it } from 'vitest'
import type { LogFields, Logger } from '../server/json-log.ts'
import type { NodeRow } from '../../../shared/src/node-row.ts'
import { HitRateWindow, NODES_KEY, startHeartbeat, type RegistryClient } from './heartbeat.ts'

/** An in-memory stand-in for @upstash/redis: records commands, can be told to fail. */
class FakeRedis implements RegistryClient {
  readonly hash = new Map<string, string>()
  readonly commands: string[] = []
  failing = false
  private waiters: Array<{ n: number; resolve: () => void }> = []

  async hset(key: string, fields: Record<string, string>): Promise<number> {
    this.commands.push(`HSET ${key}`)
    this.settle()
    if (this.failing) throw new Error('connect ECONNREFUSED https://user:secret-token@redis.example')
    for (const [k, v] of Object.entries(fields)) this.hash.set(k, v)
    return 1
  }

  async hdel(key: string, ...fields: string[]): Promise<number> {
    this.commands.push(`HDEL ${key}`)
    for (const f of fields) this.hash.delete(f)
    this.settle()
    return 1
  }

  /** Resolves once `n` HSETs have been attempted. */
  hsets(n: number): Promise<void> {
    return new Promise((resolve) => {
      this.waiters.push({ n, resolve })
      this.settle()
    })
  }

  private settle(): void {
    const count = this.commands.filter((c) => c.startsWith('HSET')).length
    this.waiters = this.waiters.filter((w) => (count >= w.n ? (w.resolve(), false) : true))
  }
}

function recordingLogger(): Logger & { lines: LogFields[] } {
  const lines: LogFields[] = []
  const push = (f: LogFields) => void lines.push(f)
  return { lines, info: push, warn: push, error: push }
}

const node = { id: 'us-east-1', url: 'http://127.0.0.1:9101', region: 'us-east', lat: 39, lon: -77.5, models: ['tiny'] }
const stats = { running: 2, waiting: 5, maxBatch: 32, kvUsedFrac: 0.125, tokPerSec: 812.5, prefillTokPerSec: 2500, draining: false }

describe('the prefix-cache hit rate in the row', () => {
  it('is hits ÷ lookups over the last minute, kept while no prompt arrives', () => {
    const w = new HitRateWindow(60_000)
    expect(w.add(0, 0, 0)).toBe(0)
    expect(w.add(1000, 100, 50)).toBe(0.5)
    expect(w.add(2000, 200, 150)).toBe(0.75)
    expect(w.add(3000, 200, 150)).toBe(0.75) // idle: the last rate stands
    // A minute on, the early lookups have left the window: only the recent ones count.
    expect(w.add(62_500, 300, 250)).toBe(1)
  })

  it('is sent with the node’s prefill rate when the cache is on', async () => {
    const redis = new FakeRedis()
    let t = 1_700_000_000_000
    let cache = { queries: 0, hits: 0, evictions: 0, bytes: 0, capacityBytes: 1 << 20 }
    const hb = startHeartbeat({ client: redis, node, stats: () => ({ ...stats, prefixCache: cache }), isDraining: () => false, log: recordingLogger(), intervalMs: 5, now: () => t })
    await redis.hsets(1)
    cache = { ...cache, queries: 400, hits: 300 }
    t += 1000
    const n = redis.commands.length
    await redis.hsets(n + 1)
    const row = JSON.parse(redis.hash.get('us-east-1')!) as NodeRow
    expect(row).toMatchObject({ prefillTokPerSec: 2500, prefixHitRate: 0.75 })
    await hb.stop()
  })
})

describe('registry heartbeat', () => {
  it('writes the node row to zl:nodes at once and every interval, and HDELs on stop', async () => {
    const redis = new FakeRedis()
    let draining = false
    const hb = startHeartbeat({ client: redis, node, stats: () => stats, isDraining: () => draining, log: recordingLogger(), intervalMs: 5, now: () => 1_700_000_000_000 })
    await redis.hsets(3)
    const row = JSON.parse(redis.hash.get('us-east-1')!) as NodeRow
    expect(row).toEqual({ ...node, maxBatch: 32, running: 2, waiting: 5, kvUsedFrac: 0.125, tokPerSec: 812.5, prefillTokPerSec: 2500, draining: false, ts: 1_700_000_000_000 })
    expect(redis.commands[0]).toBe(`HSET ${NODES_KEY}`)

    draining = true
    await hb.beat()
    expect(JSON.parse(redis.hash.get('us-east-1')!).draining).toBe(true)

    await hb.stop()
    expect(redis.commands.at(-1)).toBe(`HDEL ${NODES_KEY}`)
    expect(redis.hash.has('us-east-1')).toBe(false)
    const after = redis.commands.length
    await hb.beat() // stopped: nothing more is written
    expect(redis.commands.length).toBe(after)
  })

  it('survives Redis failures, logs them rate-limited without secrets, and recovers', async () => {
    const redis = new FakeRedis()
    redis.failing = true
    const log = recordingLogger()
    const hb = startHeartbeat({ client: redis, node, stats: () => stats, isDraining: () => false, log, intervalMs: 2 })
    await redis.hsets(10)
    const failures = log.lines.filter((l) => l.msg === 'heartbeat failed')
    expect(failures).toHaveLength(1)
    expect(JSON.stringify(log.lines)).not.toContain('secret-token')
    redis.failing = false
    await hb.beat()
    expect(log.lines.at(-1)?.msg).toBe('heartbeat recovered')
    await hb.stop()
  })
})
