import { Ratelimit } from '@upstash/ratelimit'
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from './local-upstash.ts'
import { RespConnection } from './redis-client.ts'

let up: LocalUpstash
let clients: Record<'auto-pipelined' | 'single-command', Redis>

beforeAll(async () => {
  up = await startLocalUpstash()
  const base = { url: up.restUrl, token: up.restToken, enableTelemetry: false }
  clients = {
    'auto-pipelined': new Redis(base),
    'single-command': new Redis({ ...base, enableAutoPipelining: false }),
  }
})
afterAll(async () => {
  await up?.stop()
})

let seq = 0
const uniqueId = () => `user-${Date.now()}-${seq++}`
const WINDOW_MS = 60_000

/** The sliding and fixed windows roll over on the minute: never start a burst in its last second. */
async function awayFromWindowEdge(): Promise<void> {
  const intoWindow = Date.now() % WINDOW_MS
  if (intoWindow > WINDOW_MS - 1000) await new Promise((r) => setTimeout(r, WINDOW_MS - intoWindow + 10))
}

async function redisCommandStats(): Promise<Record<string, Record<string, number>>> {
  const conn = await RespConnection.connect({ host: '127.0.0.1', port: up.redis.port })
  const info = String(await conn.send(['INFO', 'commandstats']))
  conn.close()
  const stats: Record<string, Record<string, number>> = {}
  for (const [, name, fields] of info.matchAll(/^cmdstat_(\w+):(.*)$/gm)) {
    stats[name] = Object.fromEntries(fields.split(',').map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)]))
  }
  return stats
}

const limiters = {
  slidingWindow: () => Ratelimit.slidingWindow(10, '60 s'),
  fixedWindow: () => Ratelimit.fixedWindow(10, '60 s'),
  tokenBucket: () => Ratelimit.tokenBucket(10, '60 s', 10),
}

describe('@upstash/ratelimit through the bridge', () => {
  for (const clientName of ['auto-pipelined', 'single-command'] as const) {
    for (const [algorithm, limiter] of Object.entries(limiters)) {
      it(`admits exactly 10 of 30 concurrent calls (${algorithm}, ${clientName})`, async () => {
        const ratelimit = new Ratelimit({ redis: clients[clientName], limiter: limiter(), prefix: `rl-${algorithm}` })
        const id = uniqueId()
        await awayFromWindowEdge()
        const results = await Promise.all(Array.from({ length: 30 }, () => ratelimit.limit(id)))
        expect(results.filter((r) => r.success)).toHaveLength(10)
        expect(results.every((r) => r.limit === 10)).toBe(true)
        expect(Math.min(...results.map((r) => r.remaining))).toBe(0)
      })
    }
  }

  it('charges weighted calls and refunds with a negative rate (slidingWindow)', async () => {
    const ratelimit = new Ratelimit({ redis: clients['auto-pipelined'], limiter: Ratelimit.slidingWindow(10, '60 s'), prefix: 'rl-weighted' })
    const id = uniqueId()
    await awayFromWindowEdge()
    expect(await ratelimit.limit(id, { rate: 5 })).toMatchObject({ success: true, remaining: 5 })
    expect(await ratelimit.limit(id, { rate: 5 })).toMatchObject({ success: true, remaining: 0 })
    expect(await ratelimit.limit(id, { rate: 5 })).toMatchObject({ success: false, remaining: 0 })
    // A request rejected later (e.g. by validation) gives its tokens back.
    expect(await ratelimit.limit(id, { rate: -5 })).toMatchObject({ success: true, remaining: 5 })
    expect(await ratelimit.limit(id, { rate: 5 })).toMatchObject({ success: true, remaining: 0 })
    expect(await ratelimit.limit(id)).toMatchObject({ success: false })
  })

  it('refunds with a negative rate (fixedWindow, where a rejected call is still charged)', async () => {
    const ratelimit = new Ratelimit({ redis: clients['auto-pipelined'], limiter: Ratelimit.fixedWindow(10, '60 s'), prefix: 'rl-fixed-refund', ephemeralCache: false })
    const id = uniqueId()
    await awayFromWindowEdge()
    expect(await ratelimit.limit(id, { rate: 8 })).toMatchObject({ success: true, remaining: 2 })
    expect(await ratelimit.limit(id, { rate: 5 })).toMatchObject({ success: false })
    expect(await ratelimit.limit(id, { rate: -5 })).toMatchObject({ success: true, remaining: 2 })
    expect(await ratelimit.limit(id, { rate: 2 })).toMatchObject({ success: true, remaining: 0 })
  })

  it('serves the second call by EVALSHA of the rewritten script (no second EVAL)', async () => {
    const conn = await RespConnection.connect({ host: '127.0.0.1', port: up.redis.port })
    await conn.sendBatch([['SCRIPT', 'FLUSH'], ['CONFIG', 'RESETSTAT']])
    conn.close()
    const ratelimit = new Ratelimit({ redis: clients['single-command'], limiter: Ratelimit.slidingWindow(10, '60 s'), prefix: 'rl-sha' })
    const id = uniqueId()

    expect((await ratelimit.limit(id)).success).toBe(true)
    const first = await redisCommandStats()
    expect(first.eval?.calls).toBe(1) // NOSCRIPT on EVALSHA, then the library's EVAL fallback

    expect((await ratelimit.limit(id)).success).toBe(true)
    expect((await ratelimit.getRemaining(id)).remaining).toBe(8)
    const second = await redisCommandStats()
    expect(second.eval?.calls).toBe(2) // only getRemaining's first use needed EVAL
    expect(second.evalsha.calls - first.evalsha.calls).toBe(2)
    const evalshaFailures = (s: typeof first) => (s.evalsha.failed_calls ?? 0) + (s.evalsha.rejected_calls ?? 0)
    expect(evalshaFailures(second) - evalshaFailures(first)).toBe(1) // getRemaining's first EVALSHA

    expect((await ratelimit.getRemaining(id)).remaining).toBe(8)
    const third = await redisCommandStats()
    expect(third.eval.calls).toBe(2)
    expect(evalshaFailures(third)).toBe(evalshaFailures(second))
  })
})
