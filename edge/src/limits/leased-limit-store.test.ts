/**
 * Leases over the real store: @upstash/ratelimit through the local Upstash bridge into
 * redis-server. The exact store is only wrapped to count its calls.
 */
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { createLeasedLimitStore, DEFAULT_LEASE, PEAK_MEMORY_MS } from './leased-limit-store.ts'
import type { LimitStore } from './rate-limiter.ts'
import type { Background, LimitDecision } from '../context.ts'
import { createUpstashLimitStore } from './upstash-limit-store.ts'

let up: LocalUpstash
let redis: Redis

beforeAll(async () => {
  up = await startLocalUpstash()
  redis = new Redis({ url: up.restUrl, token: up.restToken, enableTelemetry: false, enableAutoPipelining: false })
})
afterAll(async () => {
  await up?.stop()
})

let seq = 0
const keyId = () => `lease-${process.pid}-${Date.now()}-${seq++}`

/** The exact store, counting the Redis calls made and those answered so far. */
function counted(store: LimitStore): LimitStore & { calls: number; answered: number } {
  const c = {
    calls: 0,
    answered: 0,
    requests: (...a: Parameters<LimitStore['requests']>) => track(store.requests(...a)),
    tokens: (...a: Parameters<LimitStore['tokens']>) => track(store.tokens(...a)),
    refund: (...a: Parameters<LimitStore['refund']>) => track(store.refund(...a)),
    peekTokens: (...a: Parameters<LimitStore['peekTokens']>) => track(store.peekTokens(...a)),
  }
  function track<T>(p: T | Promise<T>): Promise<T> {
    c.calls++
    return Promise.resolve(p).finally(() => c.answered++)
  }
  return c
}

/** Whether `decide` was answered without waiting for Redis (a refill may start in the background). */
async function decidedLocally(exact: { answered: number }, decide: () => unknown): Promise<boolean> {
  const before = exact.answered
  await decide()
  return exact.answered === before
}

/** Collects refills so a test can wait for them (the Workers entry hands them to waitUntil). */
function tracker(): { background: Background; settled(): Promise<void> } {
  const work: Promise<unknown>[] = []
  return { background: (p) => void work.push(p), settled: async () => void (await Promise.allSettled(work)) }
}

describe('leased limit store', () => {
  it('admits a busy key mostly from its lease: far fewer Redis decisions than requests', async () => {
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ttlMs: 60_000, maxFraction: 1 / 32 })
    const id = keyId()
    const bg = tracker()
    let admitted = 0
    for (let i = 0; i < 400; i++) {
      const d = await store.requests(id, 100_000, { background: bg.background })
      if (d.success) admitted++
      // Let a refill in flight land, as time between real requests would.
      if (i % 10 === 9) await bg.settled()
    }
    await bg.settled()
    expect(admitted).toBe(400)
    expect(exact.calls).toBeLessThan(400 / 4)
    // Redis counted every admitted request (leased ones when taken), never fewer.
    const counted_ = await windowCount(id)
    expect(counted_).toBeGreaterThanOrEqual(400)
  })

  it('never leases small limits: 30 concurrent against rpm 10 admit exactly 10', async () => {
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact)
    const id = keyId()
    await awayFromWindowEdge()
    const results = await Promise.all(Array.from({ length: 30 }, () => store.requests(id, 10)))
    expect(results.filter((d) => d.success)).toHaveLength(10)
    expect(exact.calls).toBe(30)
  })

  it('two isolates sharing one budget never admit more than the limit; every refusal is Redis’s', async () => {
    const limit = 640
    const id = keyId()
    await awayFromWindowEdge()
    const startedAt = Date.now()
    const isolates = [0, 1].map(() => createLeasedLimitStore(createUpstashLimitStore(redis), { ttlMs: 60_000, maxFraction: 1 / 32 }))
    const bg = tracker()
    let admitted = 0
    const refusals: Array<{ remaining: number; resetAtMs: number }> = []
    for (let i = 0; i < 900; i++) {
      const d = await isolates[i % 2]!.requests(id, limit, { background: bg.background })
      if (d.success) admitted++
      else refusals.push(d)
      if (i % 7 === 6) await bg.settled()
    }
    await bg.settled()
    // The limit is a 60 s sliding window: a run slowed past the window's end (a loaded machine)
    // may be admitted what the window has slid free by then, the previous window's count
    // weighted down by the fraction of the new one elapsed — and no more.
    const endedAt = Date.now()
    const slid = Math.floor(endedAt / 60_000) > Math.floor(startedAt / 60_000) ? Math.ceil((limit * (endedAt % 60_000)) / 60_000) : 0
    expect(admitted).toBeLessThanOrEqual(limit + slid)
    // Leases can refuse a little early: per isolate, at most one unspent lease (limit / 32) plus
    // one refill that overshot (Redis counts it but refuses it, so it is never spent).
    expect(admitted).toBeGreaterThanOrEqual(limit - 4 * (limit / 32))
    expect(refusals.length).toBeGreaterThan(0)
    for (const r of refusals) expect(r.remaining).toBe(0)
  })

  it('spends tokens from a lease and takes refunds back into it', async () => {
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ttlMs: 60_000, maxFraction: 1 / 32 })
    const id = keyId()
    const bg = tracker()
    const tpm = 3_200_000
    const first = await store.tokens(id, tpm, 1000, { background: bg.background })
    expect(first.remaining).toBe(tpm - 1000)
    await bg.settled()
    let leased!: LimitDecision
    expect(await decidedLocally(exact, async () => void (leased = await store.tokens(id, tpm, 1000, { background: bg.background })))).toBe(true)
    expect(leased.success).toBe(true)
    // What the client is shown is what is really unspent: Redis's remaining plus the lease.
    expect(leased.remaining).toBeLessThanOrEqual(first.remaining - 1000)
    expect(await decidedLocally(exact, () => store.refund(id, tpm, 1000))).toBe(true)
    await bg.settled()
  })

  it('peeks at tokens without charging them: from a live lease locally, else from Redis', async () => {
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ttlMs: 60_000, maxFraction: 1 / 32 })
    const id = keyId()
    const tpm = 3_200_000
    // Never charged: Redis's whole bucket, and the peek leaves it whole.
    expect(await store.peekTokens(id, tpm)).toMatchObject({ limit: tpm, remaining: tpm })
    expect(await store.peekTokens(id, tpm)).toMatchObject({ remaining: tpm })
    const bg = tracker()
    const charged = await store.tokens(id, tpm, 1000, { background: bg.background })
    await bg.settled()
    let peeked!: LimitDecision
    expect(await decidedLocally(exact, async () => void (peeked = await store.peekTokens(id, tpm)))).toBe(true)
    expect(peeked.remaining).toBeLessThanOrEqual(charged.remaining)
    // The peek spent nothing: the next charge is told what the peek said, less its own cost.
    const next = await store.tokens(id, tpm, 1000, { background: bg.background })
    expect(next.remaining).toBe(peeked.remaining - 1000)
    await bg.settled()
  })

  it('a charge larger than the lease goes to Redis, which refuses what does not fit', async () => {
    const store = createLeasedLimitStore(createUpstashLimitStore(redis))
    const id = keyId()
    const d = await store.tokens(id, 6400, 7000)
    expect(d.success).toBe(false)
  })

  it('a lease smaller than a token charge goes towards it, even lapsed (a retry after a 429 is not short by it)', async () => {
    let t = 2_000_000
    const charged: number[] = []
    const inner = createUpstashLimitStore(redis)
    const exact: LimitStore = { ...inner, tokens: (k, tpm, cost, o) => (charged.push(cost), inner.tokens(k, tpm, cost, o)) }
    const store = createLeasedLimitStore(exact, { ttlMs: 1000, maxFraction: 1 / 32, now: () => t })
    const id = keyId()
    const bg = tracker()
    await store.tokens(id, 3_200_000, 1000, { background: bg.background })
    await bg.settled()
    expect(charged).toEqual([1000, 1000]) // the charge, then a lease of what was spent
    // Quiet past the peak memory, so the exact call brings no burst lease and charges only the rest.
    t += PEAK_MEMORY_MS + 5000
    expect((await store.tokens(id, 3_200_000, 5000, { background: bg.background })).success).toBe(true)
    expect(charged[2]).toBe(4000)
    await bg.settled()
  })

  it('coalesced: a burst on a quiet key shares its Redis calls, and Redis counts every admission', async () => {
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ...DEFAULT_LEASE, coalesce: true })
    const id = keyId()
    await awayFromWindowEdge()
    const results = await Promise.all(Array.from({ length: 64 }, () => store.requests(id, 1_000_000)))
    expect(results.every((d) => d.success)).toBe(true)
    // The first request's call, then one call for the 63 that arrived meanwhile (and perhaps a
    // lease refill started by it), instead of 64.
    expect(exact.calls).toBeLessThanOrEqual(3)
    expect(await windowCount(id)).toBeGreaterThanOrEqual(64)
  })

  it('coalesced: 30 concurrent against rpm 10 still admit exactly 10, each refusal Redis’s own', async () => {
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ...DEFAULT_LEASE, coalesce: true })
    const id = keyId()
    await awayFromWindowEdge()
    const results = await Promise.all(Array.from({ length: 30 }, () => store.requests(id, 10)))
    expect(results.filter((d) => d.success)).toHaveLength(10)
    for (const d of results.filter((x) => !x.success)) expect(d.remaining).toBe(0)
    expect(await windowCount(id)).toBe(10)
  })

  it('coalesced: a store failure reaches every waiting request, and the next burst asks again', async () => {
    let down = true
    const inner = createUpstashLimitStore(redis)
    const exact: LimitStore = { ...inner, requests: async (k, rpm, o) => (down ? Promise.reject(new Error('redis down')) : inner.requests(k, rpm, o)) }
    const store = createLeasedLimitStore(exact, { ...DEFAULT_LEASE, coalesce: true })
    const id = keyId()
    const failed = await Promise.allSettled(Array.from({ length: 5 }, () => store.requests(id, 1_000_000)))
    expect(failed.map((r) => r.status)).toEqual(Array(5).fill('rejected'))
    down = false
    const ok = await Promise.all(Array.from({ length: 5 }, () => store.requests(id, 1_000_000)))
    expect(ok.every((d) => d.success)).toBe(true)
  })

  it('coalesced: a burst on a key busy within the last minute takes its lease with the first call, and the rest are admitted when it answers', async () => {
    let t = 1_000_000
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ...DEFAULT_LEASE, coalesce: true, now: () => t })
    const id = keyId()
    await awayFromWindowEdge()
    const bg = tracker()
    const burst = async () => {
      const answeredAt: number[] = []
      const results = await Promise.all(Array.from({ length: 64 }, async () => { const d = await store.requests(id, 1_000_000, { background: bg.background }); answeredAt.push(exact.answered); return d }))
      expect(results.every((d) => d.success)).toBe(true)
      // A refill the burst started must not answer during the next one.
      await bg.settled()
      return answeredAt
    }
    // A quiet key: its first call charges one request, and the 63 behind it wait for a second
    // (a refill started by the first may answer before it).
    const first = exact.answered
    expect(Math.max(...(await burst())) - first).toBeGreaterThanOrEqual(2)
    // Seconds later the lease has lapsed; the key was busy within the minute: the first call
    // brings a lease for the rest, so every request is decided by the first answer.
    t += 5000
    const second = exact.answered
    expect(Math.max(...(await burst())) - second).toBe(1)
    // Redis counted every admission (and the lease, taken up front), never fewer.
    expect(await windowCount(id)).toBeGreaterThanOrEqual(128)
    // A key quiet for longer than PEAK_MEMORY_MS starts over: no lease with the first call.
    t += PEAK_MEMORY_MS + 5000
    const third = exact.answered
    expect(Math.max(...(await burst())) - third).toBeGreaterThanOrEqual(2)
  })

  it('uncoalesced (Workers): a burst on a key busy within the last minute waits for the first call’s lease instead of 64 calls', async () => {
    let t = 1_000_000
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ...DEFAULT_LEASE, now: () => t })
    const id = keyId()
    await awayFromWindowEdge()
    const bg = tracker()
    const burst = async () => {
      const before = exact.calls
      const results = await Promise.all(Array.from({ length: 64 }, () => store.requests(id, 1_000_000, { background: bg.background })))
      expect(results.every((d) => d.success)).toBe(true)
      await bg.settled()
      return exact.calls - before
    }
    // Control: a quiet key has no lease to wait for, so every request of its first burst asks Redis.
    expect(await burst()).toBeGreaterThanOrEqual(64)
    // Seconds later (lease lapsed, key busy within the minute): one call brings the burst's lease,
    // the other 63 are admitted from it (a refill it starts may make one more call).
    t += 5000
    expect(await burst()).toBeLessThanOrEqual(2)
    expect(await windowCount(id)).toBeGreaterThanOrEqual(128)
  })

  it('uncoalesced: when the call in flight fails, the requests waiting on it ask Redis themselves', async () => {
    let t = 1_000_000
    const real = createUpstashLimitStore(redis)
    let failNext = false
    let calls = 0
    const flaky: LimitStore = {
      ...real,
      requests: (...a) => {
        calls++
        if (failNext) {
          failNext = false
          return new Promise((_, reject) => setTimeout(() => reject(new Error('redis down')), 20))
        }
        return real.requests(...a)
      },
    }
    const store = createLeasedLimitStore(flaky, { ...DEFAULT_LEASE, now: () => t })
    const id = keyId()
    await awayFromWindowEdge()
    await Promise.all(Array.from({ length: 16 }, () => store.requests(id, 1_000_000)))
    t += 5000
    failNext = true
    calls = 0
    const results = await Promise.allSettled(Array.from({ length: 16 }, () => store.requests(id, 1_000_000)))
    // The first (the failed call) rejects; the 15 behind it waited, then asked Redis again (the
    // first of them with a lease for the rest, which waited for that one).
    expect(results.filter((r) => r.status === 'rejected')).toHaveLength(1)
    expect(results.filter((r) => r.status === 'fulfilled' && r.value.success)).toHaveLength(15)
    expect(calls).toBeGreaterThanOrEqual(2)
  })

  it('uncoalesced: a request waits at most burstWaitMs for a call in flight, then asks Redis itself', async () => {
    let t = 1_000_000
    const real = createUpstashLimitStore(redis)
    let hold: (() => void) | undefined
    const slow: LimitStore = {
      ...real,
      requests: async (...a) => {
        if (!hold) {
          await new Promise<void>((resolve) => (hold = resolve))
        }
        return real.requests(...a)
      },
    }
    const store = createLeasedLimitStore(slow, { ...DEFAULT_LEASE, burstWaitMs: 30, now: () => t })
    const id = keyId()
    await awayFromWindowEdge()
    // Busy once (the first call is held, so release it), then lapsed.
    const warm = store.requests(id, 1_000_000)
    hold!()
    await warm
    await Promise.all(Array.from({ length: 8 }, () => store.requests(id, 1_000_000)))
    t += 5000
    hold = undefined
    const first = store.requests(id, 1_000_000)
    const second = await store.requests(id, 1_000_000)
    expect(second.success).toBe(true)
    hold!()
    expect((await first).success).toBe(true)
  })

  it('near the limit, bursts with burst leases never admit more than the limit; each refusal is Redis’s', async () => {
    let t = 1_000_000
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ttlMs: 1000, maxFraction: 1 / 2, coalesce: true, now: () => t })
    const id = keyId()
    await awayFromWindowEdge()
    let admitted = 0
    // rpm 40, bursts of 30 five seconds apart: from the second on, the first call may bring a
    // lease (capped at half of what Redis said is left).
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(Array.from({ length: 30 }, () => store.requests(id, 40)))
      admitted += results.filter((d) => d.success).length
      for (const d of results.filter((x) => !x.success)) expect(d.remaining).toBe(0)
      t += 5000
    }
    expect(admitted).toBeGreaterThan(0)
    expect(admitted).toBeLessThanOrEqual(40)
    expect(await windowCount(id)).toBeLessThanOrEqual(40)
  })

  it('a lease that lapsed is not spent', async () => {
    let t = 1_000_000
    const exact = counted(createUpstashLimitStore(redis))
    const store = createLeasedLimitStore(exact, { ttlMs: 1000, maxFraction: 1 / 32, now: () => t })
    const id = keyId()
    const bg = tracker()
    await store.requests(id, 100_000, { background: bg.background })
    await store.requests(id, 100_000, { background: bg.background })
    await bg.settled()
    expect(await decidedLocally(exact, () => store.requests(id, 100_000, { background: bg.background }))).toBe(true)
    await bg.settled()
    t += 1001
    expect(await decidedLocally(exact, () => store.requests(id, 100_000, { background: bg.background }))).toBe(false)
  })
})

/** Requests counted in the current sliding-window bucket of `id` (the library's key layout). */
async function windowCount(id: string): Promise<number> {
  const keys = await redis.keys(`zl:rl:req:${id}:*`)
  let total = 0
  for (const k of keys) total += Number((await redis.get<number>(k)) ?? 0)
  return total
}

/** The window rolls over on the minute: start a burst that must fit in one window away from it. */
async function awayFromWindowEdge(): Promise<void> {
  const into = Date.now() % 60_000
  if (into > 55_000) await new Promise((r) => setTimeout(r, 60_000 - into + 10))
}
