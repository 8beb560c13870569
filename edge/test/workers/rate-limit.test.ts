/**
 * Per-key limits through the real @upstash/ratelimit scripts, the local bridge and redis-server
 * (DESIGN.md §3): exact admission under concurrency, the 429 headers of both dialects, the token
 * refund, and what a dead or hung Redis means under each RATE_LIMIT_FAILURE_MODE.
 */
import { SELF } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { createWorkerDeps } from '../../src/entries/worker.ts'
import { appWith, chatBody, createKey, edgeRequest, messagesBody, script, testEnv, uniqueRequestId } from './harness.ts'

describe('requests per minute', () => {
  it('admits exactly rpm of 30 concurrent requests', async () => {
    const { key } = await createKey({ rpm: 10 })
    const responses = await Promise.all(Array.from({ length: 30 }, () => SELF.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key }))))
    const statuses = await Promise.all(responses.map(async (r) => (await r.arrayBuffer(), r.status)))
    expect(statuses.filter((s) => s === 200)).toHaveLength(10)
    expect(statuses.filter((s) => s === 429)).toHaveLength(20)
  })

  it('answers 429 with retry-after and the OpenAI rate-limit headers', async () => {
    const { key } = await createKey({ rpm: 1 })
    const ok = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key }))
    await ok.arrayBuffer()
    expect(ok.headers.get('x-ratelimit-limit-requests')).toBe('1')
    expect(ok.headers.get('x-ratelimit-remaining-requests')).toBe('0')
    expect(ok.headers.get('x-ratelimit-reset-requests')).toMatch(/^(\d+ms|\d+s|\d+m\d+s)$/)
    expect(ok.headers.get('x-ratelimit-limit-tokens')).toBe('1000000')

    const refused = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key }))
    expect(refused.status).toBe(429)
    const body = (await refused.json()) as any
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' })
    const retryMs = Number(refused.headers.get('retry-after-ms'))
    expect(retryMs).toBeGreaterThan(0)
    expect(retryMs).toBeLessThanOrEqual(60_000)
    expect(Number(refused.headers.get('retry-after'))).toBe(Math.ceil(retryMs / 1000))
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0')
    expect(refused.headers.get('x-should-retry')).toBe('true')
  })

  it('answers 429 with the Anthropic rate-limit headers on /v1/messages', async () => {
    const { key } = await createKey({ rpm: 1 })
    const ok = await SELF.fetch(edgeRequest('/v1/messages', messagesBody(), { key, auth: 'x-api-key' }))
    await ok.arrayBuffer()
    expect(ok.headers.get('anthropic-ratelimit-requests-limit')).toBe('1')
    expect(ok.headers.get('anthropic-ratelimit-tokens-limit')).toBe('1000000')
    expect(ok.headers.get('x-ratelimit-limit-requests')).toBeNull()
    const refused = await SELF.fetch(edgeRequest('/v1/messages', messagesBody(), { key, auth: 'x-api-key' }))
    expect(refused.status).toBe(429)
    expect(await refused.json()).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: expect.stringContaining('1 requests per minute') } })
    expect(refused.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0')
    expect(Date.parse(refused.headers.get('anthropic-ratelimit-requests-reset')!)).toBeGreaterThan(Date.now() - 1000)
    expect(refused.headers.get('retry-after')).toBeTruthy()
  })
})

describe('tokens per minute', () => {
  it('charges bytes/4 + max_tokens up front and refuses what does not fit', async () => {
    const { key } = await createKey({ tpm: 600 })
    const body = chatBody({ max_tokens: 200 })
    const cost = Math.ceil(new TextEncoder().encode(body).byteLength / 4) + 200
    const first = await SELF.fetch(edgeRequest('/v1/chat/completions', body, { key }))
    await first.arrayBuffer()
    expect(first.status).toBe(200)
    const remaining = Number(first.headers.get('x-ratelimit-remaining-tokens'))
    expect(remaining).toBeGreaterThanOrEqual(600 - cost)
    expect(remaining).toBeLessThan(600 - cost + 20) // refill is 10 tokens/s

    const huge = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody({ max_tokens: 5000 }), { key }))
    expect(huge.status).toBe(429)
    expect(((await huge.json()) as any).error.message).toContain('exceed')
  })

  it('refunds the charge when the node refuses the request', async () => {
    const { key } = await createKey({ tpm: 600 })
    const body = chatBody({ max_tokens: 400 })
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': '400', 'eu-west': '400', 'ap-south': '400' })
    const rejected = await SELF.fetch(edgeRequest('/v1/chat/completions', body, { key, requestId }))
    await rejected.arrayBuffer()
    expect(rejected.status).toBe(400)
    // The refund happened before the answer: the header shows the budget back, and the next
    // request that needs more than half the bucket fits.
    expect(Number(rejected.headers.get('x-ratelimit-remaining-tokens'))).toBeGreaterThan(500)
    const next = await SELF.fetch(edgeRequest('/v1/chat/completions', body, { key }))
    await next.arrayBuffer()
    expect(next.status).toBe(200)
  })
})

describe('RATE_LIMIT_FAILURE_MODE with Redis down', () => {
  // The key store and registry keep the real Redis; only the limiter's store is broken.
  function brokenLimiterApp(mode: 'open' | 'closed', upstashUrl: string) {
    const broken = createWorkerDeps({ ...testEnv, RATE_LIMIT_FAILURE_MODE: mode, UPSTASH_REDIS_REST_URL: upstashUrl })
    return appWith({ RATE_LIMIT_FAILURE_MODE: mode }, { limiter: broken.limiter })
  }

  for (const [what, url] of [
    ['refuses connections', () => testEnv.TEST_DEAD_URL],
    ['never answers', () => `${testEnv.TEST_CONTROL_URL}/blackhole`],
  ] as const) {
    it(`open: admits within the timeout when Redis ${what}`, async () => {
      const app = brokenLimiterApp('open', url())
      const { key } = await createKey({ rpm: 1 })
      const started = Date.now()
      const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key }))
      await res.arrayBuffer()
      expect(res.status).toBe(200)
      expect(Date.now() - started).toBeLessThan(300 * 2 + 250)
      expect(res.headers.get('x-ratelimit-limit-requests')).toBeNull() // no real numbers to show
      const health = (await (await app.fetch(edgeRequest('/healthz', undefined))).json()) as any
      // One failure decides the request: the tokens/min check is not waited out a second time.
      expect(health.rateLimitStoreFailures).toBeGreaterThanOrEqual(1)
    })

    it(`closed: refuses within the timeout when Redis ${what}`, async () => {
      const app = brokenLimiterApp('closed', url())
      const { key } = await createKey()
      const started = Date.now()
      const res = await app.fetch(edgeRequest('/v1/messages', messagesBody(), { key }))
      expect(Date.now() - started).toBeLessThan(300 + 250)
      expect(res.status).toBe(529)
      expect(await res.json()).toEqual({ type: 'error', error: { type: 'overloaded_error', message: expect.stringContaining('Rate limiting is temporarily unavailable') } })
      expect(res.headers.get('retry-after-ms')).toBe('1000')
    })
  }
})
