/**
 * A 429 carries both limit families in the route's dialect — requests and
 * tokens — whichever limit refused it. Through the app over the real limiter stack
 * (failure policy → leases → @upstash/ratelimit → the local Upstash bridge → redis-server);
 * the tokens figures on a requests/min 429 are read, never charged.
 */
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { appHarness, CHAT, chatBody, MESSAGES, messagesBody } from '../../test/support/app-harness.ts'
import { createLeasedLimitStore, DEFAULT_LEASE } from '../limits/leased-limit-store.ts'
import { withFailurePolicy, type RateLimiter } from '../limits/rate-limiter.ts'
import { createUpstashLimitStore } from '../limits/upstash-limit-store.ts'

let up: LocalUpstash
let limiter: RateLimiter

beforeAll(async () => {
  up = await startLocalUpstash()
  const redis = new Redis({ url: up.restUrl, token: up.restToken, enableTelemetry: false, enableAutoPipelining: false, retry: false })
  limiter = withFailurePolicy(createLeasedLimitStore(createUpstashLimitStore(redis), DEFAULT_LEASE), { mode: 'open', timeoutMs: 2000 })
})
afterAll(async () => {
  await up?.stop()
})

let seq = 0
const keyId = () => `rl429-${process.pid}-${Date.now()}-${seq++}`

const FAMILIES = {
  openai: { path: CHAT, body: chatBody, names: (kind: string) => ({ limit: `x-ratelimit-limit-${kind}`, remaining: `x-ratelimit-remaining-${kind}`, reset: `x-ratelimit-reset-${kind}` }) },
  anthropic: { path: MESSAGES, body: messagesBody, names: (kind: string) => ({ limit: `anthropic-ratelimit-${kind}-limit`, remaining: `anthropic-ratelimit-${kind}-remaining`, reset: `anthropic-ratelimit-${kind}-reset` }) },
} as const

function figures(res: Response, names: { limit: string; remaining: string; reset: string }) {
  return { limit: res.headers.get(names.limit), remaining: res.headers.get(names.remaining), reset: res.headers.get(names.reset) }
}

/** Waits (never sleeps) until a minute's sliding window has room for a short burst in one window. */
async function awayFromWindowEdge(): Promise<void> {
  const into = Date.now() % 60_000
  if (into > 55_000) await new Promise((r) => setTimeout(r, 60_000 - into + 10))
}

describe('a 429 carries both limit families', () => {
  for (const [dialect, f] of Object.entries(FAMILIES)) {
    it(`${dialect}: a requests/min 429 also carries the tokens figures, uncharged`, async () => {
      await awayFromWindowEdge()
      const h = await appHarness({ limiter, keyId: keyId(), rpm: 2, tpm: 10_000 })
      const ok = [await h.post(f.path, f.body), await h.post(f.path, f.body)]
      expect(ok.map((r) => r.status)).toEqual([200, 200])
      const tokensAfterTwo = figures(ok[1]!, f.names('tokens')).remaining
      const refused = await h.post(f.path, f.body)
      expect(refused.status).toBe(429)
      expect(figures(refused, f.names('requests'))).toEqual({ limit: '2', remaining: '0', reset: expect.any(String) })
      const tokens = figures(refused, f.names('tokens'))
      expect(tokens).toEqual({ limit: '10000', remaining: expect.stringMatching(/^\d+$/), reset: expect.any(String) })
      // Nothing was charged for the refused request: what is left is what the last charge left
      // (or more, if the bucket refilled meanwhile).
      expect(Number(tokens.remaining)).toBeGreaterThanOrEqual(Number(tokensAfterTwo))
      expect(Number(tokens.remaining)).toBeLessThanOrEqual(10_000)
      const again = await h.post(f.path, f.body)
      expect(Number(figures(again, f.names('tokens')).remaining)).toBeGreaterThanOrEqual(Number(tokens.remaining))
    })

    it(`${dialect}: a tokens/min 429 also carries the requests figures`, async () => {
      const h = await appHarness({ limiter, keyId: keyId(), rpm: 100, tpm: 60 })
      const refused = await h.post(f.path, { ...f.body, max_tokens: 100 })
      expect(refused.status).toBe(429)
      expect(figures(refused, f.names('tokens'))).toEqual({ limit: '60', remaining: expect.stringMatching(/^\d+$/), reset: expect.any(String) })
      expect(figures(refused, f.names('requests'))).toEqual({ limit: '100', remaining: '99', reset: expect.any(String) })
    })
  }

  it('a key never charged shows its whole token budget on a requests/min 429', async () => {
    await awayFromWindowEdge()
    const id = keyId()
    // rpm 1 spent by a request whose tokens are then refused (cost > tpm, not kept by the bucket).
    const h = await appHarness({ limiter, keyId: id, rpm: 1, tpm: 60 })
    expect((await h.post(CHAT, { ...chatBody, max_tokens: 100 })).status).toBe(429)
    const refused = await h.post(CHAT, chatBody)
    expect(refused.status).toBe(429)
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0')
    expect(refused.headers.get('x-ratelimit-remaining-tokens')).toBe('60')
  })
})
