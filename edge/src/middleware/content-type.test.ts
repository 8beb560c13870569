/**
 * Valid JSON declared as anything but JSON is refused 415 in the dialect's
 * shape, naming the header to send, before auth (no key lookup, no rate-limit unit, no node).
 */
import { describe, expect, it } from 'vitest'
import { appHarness, CHAT, chatBody, MESSAGES, messagesBody } from '../../test/support/app-harness.ts'
import type { RateLimiter } from '../limits/rate-limiter.ts'
import { isJsonContentType } from './content-type.ts'

function countingLimiter() {
  const calls = { requests: 0, tokens: 0 }
  const admit = (limit: number) => ({ success: true, limit, remaining: limit - 1, resetAtMs: Date.now() + 1000 })
  const limiter: RateLimiter = {
    checkRequests: async (_k, rpm) => (calls.requests++, admit(rpm)),
    chargeTokens: async (_k, tpm) => (calls.tokens++, admit(tpm)),
    peekTokens: async (_k, tpm) => (calls.tokens++, admit(tpm)),
    refundTokens: async () => {},
    failureCount: () => 0,
  }
  return { limiter, calls }
}

const NOT_JSON: Array<[string, Record<string, string>]> = [
  ['text/plain', { 'content-type': 'text/plain' }],
  ['text/plain;charset=UTF-8 (fetch’s default for a string body)', { 'content-type': 'text/plain;charset=UTF-8' }],
  ['form-urlencoded', { 'content-type': 'application/x-www-form-urlencoded' }],
  ['multipart', { 'content-type': 'multipart/form-data; boundary=x' }],
  ['XML', { 'content-type': 'application/xml' }],
  ['JSON in another charset', { 'content-type': 'application/json; charset=iso-8859-1' }],
  // A byte body sets no Content-Type of its own.
  ['no header', {}],
]

describe('generate routes refuse a body not declared as JSON', () => {
  for (const [name, headers] of NOT_JSON) {
    it(`${name}: 415 in both dialects, before auth and the limiter`, async () => {
      const { limiter, calls } = countingLimiter()
      const h = await appHarness({ limiter })
      const bytes = (b: unknown) => new TextEncoder().encode(JSON.stringify(b))
      const openai = await h.post(CHAT, bytes(chatBody), headers)
      expect(openai.status).toBe(415)
      expect(await openai.json()).toEqual({
        error: { message: expect.stringContaining("'Content-Type: application/json'"), type: 'invalid_request_error', param: null, code: 'unsupported_media_type' },
      })
      const anthropic = await h.post(MESSAGES, bytes(messagesBody), headers)
      expect(anthropic.status).toBe(415)
      expect(await anthropic.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining("'Content-Type: application/json'") } })
      expect(h.counts).toEqual({ keyLookups: 0, upstreamCalls: 0 })
      expect(calls).toEqual({ requests: 0, tokens: 0 })
    })
  }

  it('answers a caller without a key the same 415, and nothing else', async () => {
    const h = await appHarness({ limiter: countingLimiter().limiter })
    const res = await h.post(CHAT, JSON.stringify(chatBody), { 'content-type': 'text/plain', authorization: '' })
    expect(res.status).toBe(415)
    expect((await res.json()) as unknown).toMatchObject({ error: { code: 'unsupported_media_type' } })
    expect([...res.headers.keys()].filter((k) => k.includes('ratelimit'))).toEqual([])
  })

  it('admits JSON with parameters and application/*+json', async () => {
    const { limiter, calls } = countingLimiter()
    const h = await appHarness({ limiter })
    for (const type of ['application/json', 'application/json; charset=utf-8', 'Application/JSON;charset="UTF-8"', 'application/vnd.api+json']) {
      const res = await h.post(CHAT, chatBody, { 'content-type': type })
      expect(res.status, type).toBe(200)
    }
    expect(calls.requests).toBe(4)
    expect(h.counts.upstreamCalls).toBe(4)
  })
})

describe('isJsonContentType', () => {
  it('accepts JSON media types and rejects look-alikes', () => {
    expect(isJsonContentType('application/json ; charset=utf8')).toBe(true)
    expect(isJsonContentType('application/problem+json')).toBe(true)
    for (const t of [undefined, '', 'json', 'application/jsonx', 'text/json', 'application/json+xml', 'application/+json']) expect(isJsonContentType(t), String(t)).toBe(false)
  })
})
