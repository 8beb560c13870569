import { once } from 'node:events'
import { createServer, type Server, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import { Ratelimit } from '@upstash/ratelimit'
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { createUpstashPool, UndiciRedisRequester, UpstashTimeoutError } from './undici-redis-requester.ts'

let up: LocalUpstash
let pool: ReturnType<typeof createUpstashPool>
let requester: UndiciRedisRequester
let redis: Redis

beforeAll(async () => {
  up = await startLocalUpstash()
  pool = createUpstashPool(up.restUrl)
  requester = new UndiciRedisRequester({ url: up.restUrl, token: up.restToken, timeoutMs: 2000, pool })
  redis = new Redis(requester)
})
afterAll(async () => {
  await pool?.close()
  await up?.stop()
})

let seq = 0
const unique = (name: string) => `undici-req:${name}:${Date.now()}:${seq++}`

describe('UndiciRedisRequester under @upstash/redis', () => {
  it('runs single commands with the library’s deserialisation', async () => {
    const key = unique('single')
    expect(await redis.set(key, 'v1')).toBe('OK')
    expect(await redis.get(key)).toBe('v1')
    expect(await redis.incr(`${key}:n`)).toBe(1)
    expect(await redis.hset(`${key}:h`, { a: '1', b: 'two' })).toBe(2)
    expect(await redis.hgetall(`${key}:h`)).toEqual({ a: 1, b: 'two' })
    await redis.set(`${key}:json`, { model: 'tiny', n: [1, 2] })
    expect(await redis.get(`${key}:json`)).toEqual({ model: 'tiny', n: [1, 2] })
    expect(await redis.get(unique('absent'))).toBeNull()
  })

  it('runs a pipeline and a multi-exec, answers in order', async () => {
    const key = unique('pipe')
    const p = redis.pipeline()
    p.set(key, 'a')
    p.incrby(`${key}:n`, 5)
    p.get(key)
    p.hset(`${key}:h`, { f: 'x' })
    p.expire(key, 60)
    expect(await p.exec()).toEqual(['OK', 5, 'a', 1, 1])
    const m = redis.multi()
    m.incr(`${key}:n`)
    m.get(`${key}:n`)
    expect(await m.exec()).toEqual([6, 6])
  })

  it('keeps the upstash-sync-token round trip', async () => {
    const own = new UndiciRedisRequester({ url: up.restUrl, token: up.restToken, timeoutMs: 2000, pool })
    await new Redis(own).set(unique('sync'), '1')
    expect(own.upstashSyncToken).not.toBe('')
    const off = new UndiciRedisRequester({ url: up.restUrl, token: up.restToken, timeoutMs: 2000, pool, readYourWrites: false })
    await new Redis(off).set(unique('sync'), '1')
    expect(off.upstashSyncToken).toBe('')
  })

  it('admits exactly 10 of 30 concurrent slidingWindow(10) calls (EVALSHA, NOSCRIPT fallback)', async () => {
    const ratelimit = new Ratelimit({ redis, limiter: Ratelimit.slidingWindow(10, '60 s'), prefix: unique('rl'), ephemeralCache: false, analytics: false, enableProtection: false })
    const id = 'user'
    // The sliding window rolls over on the minute: never start a burst in its last second.
    const intoWindow = Date.now() % 60_000
    if (intoWindow > 59_000) await new Promise((r) => setTimeout(r, 60_000 - intoWindow + 10))
    const results = await Promise.all(Array.from({ length: 30 }, () => ratelimit.limit(id)))
    expect(results.filter((r) => r.success)).toHaveLength(10)
    expect(Math.min(...results.map((r) => r.remaining))).toBe(0)
  })

  it('rejects a server error with the server’s text only, never the command', async () => {
    const secret = 'sk-prompt-text-that-must-not-leak'
    const key = unique('err')
    await redis.set(key, 'not-a-number')
    const err = await redis.incrby(key, 1).then(() => undefined, (e: unknown) => e as Error)
    expect(err).toBeInstanceOf(Error)
    expect(err!.message).toMatch(/not an integer/)
    expect(err!.message).not.toContain(key)
    const bad = await redis.eval(`return redis.call('NOPE', '${secret}')`, [unique('lua')], [secret]).then(() => undefined, (e: unknown) => e as Error)
    expect(bad).toBeInstanceOf(Error)
    expect(bad!.message).not.toContain(secret)
    const unauthorized = new Redis(new UndiciRedisRequester({ url: up.restUrl, token: 'wrong-token', timeoutMs: 2000, pool }))
    const denied = await unauthorized.get(secret).then(() => undefined, (e: unknown) => e as Error)
    expect(denied?.message).toBe('Unauthorized')
  })

  it('rejects within its timeout when the server never answers', async () => {
    const sockets = new Set<Socket>()
    const hung: Server = createServer((s) => {
      sockets.add(s)
      s.on('error', () => {})
    })
    hung.listen(0, '127.0.0.1')
    await once(hung, 'listening')
    const url = `http://127.0.0.1:${(hung.address() as AddressInfo).port}`
    const stuck = new UndiciRedisRequester({ url, token: 't', timeoutMs: 200 })
    try {
      const client = new Redis(stuck)
      for (const call of [() => client.get('k'), () => client.pipeline().get('a').get('b').exec()]) {
        const started = performance.now()
        const err = await call().then(() => undefined, (e: unknown) => e)
        const elapsed = performance.now() - started
        expect(err).toBeInstanceOf(UpstashTimeoutError)
        expect(elapsed).toBeGreaterThanOrEqual(190)
        expect(elapsed).toBeLessThan(200 + 150)
      }
    } finally {
      await stuck.close()
      for (const s of sockets) s.destroy()
      hung.close()
    }
  })

  it('rejects within its timeout when the answer’s body stalls after the headers', async () => {
    const sockets = new Set<Socket>()
    const stalled: Server = createServer((s) => {
      sockets.add(s)
      s.on('error', () => {})
      s.once('data', () => s.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"result":'))
    })
    stalled.listen(0, '127.0.0.1')
    await once(stalled, 'listening')
    const stuck = new UndiciRedisRequester({ url: `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`, token: 't', timeoutMs: 200 })
    try {
      const started = performance.now()
      const err = await new Redis(stuck).get('k').then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(UpstashTimeoutError)
      expect(performance.now() - started).toBeLessThan(200 + 150)
    } finally {
      await stuck.close()
      for (const s of sockets) s.destroy()
      stalled.close()
    }
  })

  it('reuses keep-alive connections', async () => {
    const own = createUpstashPool(up.restUrl)
    try {
      const client = new Redis(new UndiciRedisRequester({ url: up.restUrl, token: up.restToken, timeoutMs: 2000, pool: own }))
      for (let i = 0; i < 20; i++) await client.incr(unique('ka'))
      // Sequential calls: a connection frees up a tick after its answer, so the pool may open a
      // second one for the next call, never one per call.
      expect(own.stats.connected).toBeGreaterThanOrEqual(1)
      expect(own.stats.connected).toBeLessThanOrEqual(2)
    } finally {
      await own.close()
    }
  })
})
