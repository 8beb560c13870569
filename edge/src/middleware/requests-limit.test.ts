/**
 * A hostile body gets a prompt 4xx while the rate limiter's Redis hangs.
 * The app is wired as the entries wire it (composeEdgeDeps, @upstash/redis clients with
 * redisClientOptions) against a real Upstash bridge, behind a stand-in that holds every
 * rate-limit script call unanswered. Before the fix each of these bodies waited for the
 * requests/min decision — here RATE_LIMIT_TIMEOUT_MS, 10 s — before its 400.
 */
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { startHeldUpstash, type HeldUpstash } from '../../test/support/held-upstash.ts'
import { createApp } from '../app.ts'
import { POSITIVE_TTL_MS } from '../keys/key-cache.ts'
import { parseEdgeConfig } from '../config.ts'
import { composeEdgeDeps, redisClientOptions } from '../entries/compose-edge.ts'

let up: LocalUpstash
let slow: HeldUpstash
let key: string

beforeAll(async () => {
  up = await startLocalUpstash()
  // The limiter's calls are Lua scripts (EVALSHA, EVAL on NOSCRIPT); key and registry reads are not.
  slow = await startHeldUpstash(up.restUrl, (body) => /"eval/i.test(body))
  key = generateApiKey()
  const redis = new Redis({ url: up.restUrl, token: up.restToken, enableTelemetry: false })
  await redis.hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: `key_${crypto.randomUUID().slice(0, 8)}`, tenant: 't', name: 'n', rpm: 0, tpm: 0, models: ['*'], created: Date.now(), disabled: false }))
})
afterAll(async () => {
  slow?.release()
  await slow?.close()
  await up?.stop()
})

function app(upstashUrl = slow.url, now?: () => number) {
  const config = parseEdgeConfig({
    UPSTASH_REDIS_REST_URL: upstashUrl,
    UPSTASH_REDIS_REST_TOKEN: up.restToken,
    EDGE_SHARED_SECRET: 'zl-test-edge-secret-0123456789',
    GPU_NODES: JSON.stringify([{ id: 'n1', url: 'http://node.test', region: 'local', lat: 0, lon: 0, models: ['tiny'] }]),
    RATE_LIMIT_TIMEOUT_MS: '10000',
    REQUEST_LOG: '0',
  })
  const deps = composeEdgeDeps(config, { redis: (timeoutMs) => new Redis(redisClientOptions(config, timeoutMs)), upstream: async () => Response.json({ ok: true }) })
  const built = createApp({ ...deps, latency: undefined, ...(now ? { now } : {}) })
  return {
    limiter: deps.limiter,
    get: (path: string) => built.request(path),
    post: (body: string | Uint8Array) =>
      built.request('/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body }),
  }
}

const HOSTILE: Array<[string, string | Uint8Array, number]> = [
  ['invalid UTF-8', new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]), 400],
  ['null model', JSON.stringify({ model: null, messages: [{ role: 'user', content: 'x' }] }), 400],
  ['unquoted keys', '{model: tiny, messages: []}', 400],
  ['n = 9', JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], n: 9 }), 400],
  ['empty', '', 400],
  ['over 1 MiB', JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'a'.repeat(1024 * 1024) }] }), 413],
]

describe('with the rate limiter’s Redis hanging', () => {
  it('answers each hostile body its 4xx while the requests/min call is still unanswered', async () => {
    const edge = app()
    for (const [name, body, status] of HOSTILE) {
      const heldBefore = slow.held
      const res = await edge.post(body)
      expect(res.status, name).toBe(status)
      await res.arrayBuffer()
      // The failure policy never had to decide (RATE_LIMIT_TIMEOUT_MS did not pass), and the
      // request's own limiter call reaches Redis and stays unanswered: the 4xx did not wait for it.
      expect(edge.limiter.failureCount(), name).toBe(0)
      await expect.poll(() => slow.held).toBe(heldBefore + 1)
    }
  })

  it('a valid body waits for the decision, and is served once Redis answers', async () => {
    const edge = app()
    const heldBefore = slow.held
    const pending = Promise.resolve(edge.post(JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })))
    let answered = false
    void pending.then(() => (answered = true))
    await expect.poll(() => slow.held).toBe(heldBefore + 1)
    expect(answered).toBe(false)
    slow.release()
    const res = await pending
    expect(res.status).toBe(200)
    expect(edge.limiter.failureCount()).toBe(0)
  })
})

describe('with the whole store hanging once a key’s cache entry has expired', () => {
  it('a key this isolate knew is still authenticated (stale if error): a bad body gets its 400, not a 503', async () => {
    let hang = false
    const store = await startHeldUpstash(up.restUrl, () => hang)
    try {
      let t = Date.now()
      const edge = app(store.url, () => t)
      const ok = await edge.post(JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }))
      expect(ok.status).toBe(200)
      // Past the key's 30 s cache entry, and every Redis call now hangs: the key lookup gives up
      // after KEY_LOOKUP_TIMEOUT_MS and the expired entry stands in.
      t += POSITIVE_TTL_MS + 1000
      hang = true
      const bad = await edge.post('{model: tiny}')
      expect(bad.status).toBe(400)
      expect((await bad.json()) as unknown).toMatchObject({ error: { code: 'invalid_json' } })
      expect((await (await edge.get('/healthz')).json()) as unknown).toMatchObject({ keyLookupsServedStale: 1 })
    } finally {
      store.release()
      await store.close()
    }
  })
})
