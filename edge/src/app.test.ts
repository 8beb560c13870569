/**
 * A dialect registered beside the three real ones (shared/test/support/fourth-dialect.ts) is
 * served by the unchanged app: its route, its parser, its error shape, its rate-limit headers,
 * its stream error event and its latency record. In-memory keys, limiter, registry and node.
 */
import { describe, expect, it, vi } from 'vitest'
import { DIALECTS_WITH_FOURTH } from '../../shared/test/support/fourth-dialect.ts'
import { hashApiKey, type ApiKeyRecord } from '../../shared/src/api-key.ts'
import { resumeHeader, resumeIdLine } from '../../shared/src/resume-wire.ts'
import { createApp } from './app.ts'
import { parseEdgeConfig } from './config.ts'
import { createMemoryKeyStore } from '../test/support/memory-key-store.ts'
import type { LatencySample } from './latency/latency-recorder.ts'
import type { RateLimiter } from './limits/rate-limiter.ts'
import type { LimitDecision } from './context.ts'
import type { UpstreamFetch } from './proxy/upstream-fetch.ts'
import type { RoutableNode } from './routing/pick-node.ts'

const KEY = 'zl-0123456789abcdefghijklmnopqrstuv'
const BATCH_KEY = 'zl-batch56789abcdefghijklmnopqrstuv'
const NOW = Date.UTC(2026, 0, 1, 12, 0, 0)
const NODE: RoutableNode = { id: 'n1', url: 'http://node.test', region: 'local', lat: 0, lon: 0, maxBatch: 8, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 100, draining: false, source: 'static' }

interface Harness {
  call(path: string, body: unknown, headers?: Record<string, string>): Promise<Response>
  /** What the stand-in node answers, given the request's headers. */
  answer: (headers: Record<string, string>) => Response
  /** The node table (one node unless a test sets more). */
  nodes: RoutableNode[]
  /** Whether the limiter admits the next request. */
  admit: boolean
  samples: LatencySample[]
  forwardedPaths: string[]
}

async function harness(): Promise<Harness> {
  const config = parseEdgeConfig({ UPSTASH_REDIS_REST_URL: 'http://redis.test', UPSTASH_REDIS_REST_TOKEN: 't', EDGE_SHARED_SECRET: 'zl-test-edge-secret-0123456789', REQUEST_LOG: '0' })
  const record: ApiKeyRecord = { id: 'k1', tenant: 't1', name: '', rpm: 60, tpm: 1000, models: ['*'], created: 0, disabled: false }
  const records = new Map<string, ApiKeyRecord>([
    [await hashApiKey(KEY), record],
    [await hashApiKey(BATCH_KEY), { ...record, id: 'k2', priority: 'batch' }],
  ])
  const h: Harness = {
    call: async (path, body, headers = { authorization: `Bearer ${KEY}` }) =>
      await app.request(path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) }),
    answer: () => Response.json({ text: 'hi' }),
    nodes: [NODE],
    admit: true,
    samples: [],
    forwardedPaths: [],
  }
  const decision = (limit: number): LimitDecision => ({ success: h.admit, limit, remaining: h.admit ? limit - 1 : 0, resetAtMs: NOW + 1500 })
  const limiter: RateLimiter = {
    checkRequests: async (_key, rpm) => decision(rpm),
    chargeTokens: async (_key, tpm) => decision(tpm),
    peekTokens: async (_key, tpm) => ({ success: true, limit: tpm, remaining: tpm, resetAtMs: NOW + 1000 }),
    refundTokens: async () => {},
    failureCount: () => 0,
  }
  const upstream: UpstreamFetch = async (url, init) => {
    h.forwardedPaths.push(new URL(url).pathname)
    return h.answer(init.headers as Record<string, string>)
  }
  const app = createApp({
    config,
    keys: createMemoryKeyStore(records),
    limiter,
    registry: { table: async () => ({ nodes: h.nodes, source: 'static', fetchedAtMs: NOW }), markDown: () => {} },
    upstream,
    latency: { record: async (s) => void h.samples.push(s) },
    now: () => NOW,
  }, DIALECTS_WITH_FOURTH)
  return h
}

const fourthBody = { model: 'tiny', prompt: 'hello', max_tokens: 4 }

describe('a dialect registered beside the three real ones', () => {
  it('is routed to the node on its own path, with its rate-limit headers, and recorded', async () => {
    const h = await harness()
    const res = await h.call('/v1/fourth', fourthBody)
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ text: 'hi' })
    expect(h.forwardedPaths).toEqual(['/v1/fourth'])
    expect(res.headers.get('fourth-requests-limit')).toBe('60')
    expect(res.headers.get('fourth-tokens-left')).toBe('999')
    expect(res.headers.get('fourth-requests-reset-s')).toBe('2')
    expect(res.headers.get('x-ratelimit-limit-requests')).toBeNull()
    await vi.waitFor(() => expect(h.samples.map((s) => [s.status, s.model])).toEqual([[200, 'tiny']]))
  })

  it('answers a missing key and a bad body in its error shape', async () => {
    const h = await harness()
    const unauthorized = await h.call('/v1/fourth', fourthBody, {})
    expect(unauthorized.status).toBe(401)
    expect(await unauthorized.json()).toEqual({ failure: { kind: 'fourth_unauthorized', detail: expect.stringContaining('Missing API key') } })
    const bad = await h.call('/v1/fourth', { model: 'tiny' })
    expect(bad.status).toBe(400)
    expect(await bad.json()).toEqual({ failure: { kind: 'fourth_invalid_request', detail: expect.stringContaining("'prompt'") } })
    expect(h.forwardedPaths).toEqual([])
  })

  it('refuses over the limit with 429, the generic retry headers and its limit headers', async () => {
    const h = await harness()
    h.admit = false
    const res = await h.call('/v1/fourth', fourthBody)
    expect(res.status).toBe(429)
    expect((await res.json()) as unknown).toMatchObject({ failure: { kind: 'fourth_rate_limited' } })
    expect(res.headers.get('retry-after-ms')).toBe('1500')
    expect(res.headers.get('x-should-retry')).toBe('true')
    expect(res.headers.get('fourth-requests-left')).toBe('0')
  })

  it('ends a stream that breaks mid-way with its error event', async () => {
    const h = await harness()
    h.answer = () => {
      let sent = false
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent) return controller.error(new Error('node died'))
          sent = true
          controller.enqueue(new TextEncoder().encode('event: text\ndata: {"text":"hi"}\n\n'))
        },
      })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    }
    const res = await h.call('/v1/fourth', { ...fourthBody, stream: true })
    expect(await res.text()).toBe(
      'event: text\ndata: {"text":"hi"}\n\n' +
        'event: failure\ndata: {"failure":{"kind":"fourth_upstream_unavailable","detail":"The GPU node failed while streaming this response."}}\n\n',
    )
  })

  it("ends a stream at its own final frame: passed on whole, without an error event or a resume", async () => {
    const h = await harness()
    const stream = resumeIdLine(1, [5]) + 'event: text\ndata: {"text":"hi"}\n\n' + 'event: done\ndata: {"reason":"stop","output_tokens":1}\n\n'
    h.answer = () => new Response(stream, { headers: { 'content-type': 'text/event-stream' } })
    const res = await h.call('/v1/fourth', { ...fourthBody, stream: true })
    expect(await res.text()).toBe(stream)
    expect(h.forwardedPaths).toEqual(['/v1/fourth'])
  })

  it('resumes a stream whose node broke on another node, handed the delivered tokens, in its own frames', async () => {
    const h = await harness()
    h.nodes = [NODE, { ...NODE, id: 'n2', url: 'http://node2.test' }]
    const first = resumeIdLine(1, [5]) + 'event: text\ndata: {"text":"hi"}\n\n'
    const rest = resumeIdLine(2, [6]) + 'event: text\ndata: {"text":" there"}\n\n' + 'event: done\ndata: {"reason":"length","output_tokens":2}\n\n'
    const resumed: string[] = []
    h.answer = (headers) => {
      if (headers['x-zl-resume'] !== undefined) {
        resumed.push(headers['x-zl-resume'])
        return new Response(rest, { headers: { 'content-type': 'text/event-stream' } })
      }
      let sent = false
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent) return controller.error(new Error('node died'))
          sent = true
          controller.enqueue(new TextEncoder().encode(first))
        },
      })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    }
    const res = await h.call('/v1/fourth', { ...fourthBody, stream: true })
    expect(await res.text()).toBe(first + rest)
    expect(resumed).toEqual([resumeHeader([5], false)])
  })

  it('leaves the real dialects and the OpenAI fallback for other paths as they were', async () => {
    const h = await harness()
    expect(await (await h.call('/v1/messages', {}, {})).json()).toMatchObject({ type: 'error', error: { type: 'authentication_error' } })
    const unknown = await h.call('/v1/nope', {})
    expect(unknown.status).toBe(404)
    expect(await unknown.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'not_found' } })
  })
})

describe('structured output at the edge', () => {
  const chat = (response_format: unknown) => ({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], response_format })

  it('forwards a response_format the node can enforce', async () => {
    const h = await harness()
    const res = await h.call('/v1/chat/completions', chat({ type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } } } } }))
    expect(res.status).toBe(200)
    expect(h.forwardedPaths).toEqual(['/v1/chat/completions'])
  })

  it('refuses what the grammar engine cannot enforce with a 400 naming it, without asking a node', async () => {
    const h = await harness()
    const res = await h.call('/v1/chat/completions', chat({ type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } }))
    expect(res.status).toBe(400)
    const body = (await res.json()) as { error: { message: string; param: string } }
    expect(body.error.param).toBe('response_format.json_schema.schema')
    expect(body.error.message).toContain("'response_format.json_schema.schema.uniqueItems' is not supported")
    expect(h.forwardedPaths).toEqual([])
  })
})

describe('what the edge tells the node of priority and supersession', () => {
  const body = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }
  async function sent(key: string, extra: Record<string, string> = {}, fields: Record<string, unknown> = {}): Promise<Record<string, string>> {
    const h = await harness()
    let seen: Record<string, string> = {}
    h.answer = (headers) => {
      seen = headers
      return Response.json({ id: 'x', object: 'chat.completion', choices: [] })
    }
    expect((await h.call('/v1/chat/completions', { ...body, ...fields }, { authorization: `Bearer ${key}`, ...extra })).status).toBe(200)
    return seen
  }

  it("sends the key's class as x-zl-priority, lowered by the request's ask but never raised above the class", async () => {
    expect((await sent(KEY))['x-zl-priority']).toBe('0')
    expect((await sent(KEY, { 'x-zl-priority': 'batch' }))['x-zl-priority']).toBe('1000')
    expect((await sent(KEY, { 'x-zl-priority': '7' }))['x-zl-priority']).toBe('7')
    expect((await sent(BATCH_KEY))['x-zl-priority']).toBe('1000')
    expect((await sent(BATCH_KEY, { 'x-zl-priority': 'interactive' }))['x-zl-priority']).toBe('1000')
    expect((await sent(BATCH_KEY, { 'x-zl-priority': '5000' }))['x-zl-priority']).toBe('5000')
    // vLLM's body field does the same; with the header too, the later of the two asks wins.
    expect((await sent(KEY, {}, { priority: 7 }))['x-zl-priority']).toBe('7')
    expect((await sent(KEY, {}, { priority: -5 }))['x-zl-priority']).toBe('0')
    expect((await sent(BATCH_KEY, {}, { priority: 3 }))['x-zl-priority']).toBe('1000')
    expect((await sent(KEY, { 'x-zl-priority': '20' }, { priority: 9 }))['x-zl-priority']).toBe('20')
  })

  it('passes x-zl-supersede on with the time the edge received the request', async () => {
    const headers = await sent(KEY, { 'x-zl-supersede': 'doc-7' })
    expect(headers['x-zl-supersede']).toBe('doc-7')
    expect(headers['x-zl-supersede-at']).toBe(String(NOW))
    expect((await sent(KEY))['x-zl-supersede']).toBeUndefined()
  })

  it('refuses a malformed ask with a 400 naming the header, before any node is asked', async () => {
    for (const [name, value] of [['x-zl-priority', 'urgent'], ['x-zl-priority', '-1'], ['x-zl-supersede', 'has space'], ['priority', 'high']] as const) {
      const h = await harness()
      const asBody = name === 'priority'
      const res = await h.call('/v1/chat/completions', asBody ? { ...body, priority: value } : body, { authorization: `Bearer ${KEY}`, ...(asBody ? {} : { [name]: value }) })
      expect(res.status).toBe(400)
      expect(await res.json()).toMatchObject({ error: { param: name } })
      expect(h.forwardedPaths).toEqual([])
    }
  })
})
