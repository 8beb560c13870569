/**
 * Cache-affine placement through the app (in-memory keys, limiter and registry; a stand-in
 * upstream): the x-zl-affinity header and latency record, AFFINITY=off, a failover, and a burst
 * of one hot key spread by the load this isolate has sent since the nodes' heartbeats.
 */
import { describe, expect, it } from 'vitest'
import { hashApiKey } from '../../../shared/src/api-key.ts'
import { createApp } from '../app.ts'
import { parseEdgeConfig } from '../config.ts'
import { createMemoryKeyStore } from '../../test/support/memory-key-store.ts'
import type { LatencySample } from '../latency/latency-recorder.ts'
import type { RateLimiter } from '../limits/rate-limiter.ts'
import type { UpstreamFetch } from '../proxy/upstream-fetch.ts'
import type { RoutableNode } from './../routing/pick-node.ts'

const KEY = 'zl-0123456789abcdefghijklmnopqrstuv'
const NOW = Date.UTC(2026, 0, 1, 12, 0, 0)
const node = (id: string): RoutableNode => ({ id, url: `http://${id}.test`, region: 'us-east', lat: 39, lon: -77.5, models: ['tiny'], maxBatch: 64, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 1000, draining: false, ts: NOW - 200, source: 'registry' })

async function harness(env: Record<string, string> = {}) {
  const config = parseEdgeConfig({ UPSTASH_REDIS_REST_URL: 'http://redis.test', UPSTASH_REDIS_REST_TOKEN: 't', EDGE_SHARED_SECRET: 'zl-test-edge-secret-0123456789', REQUEST_LOG: '0', ...env })
  const records = new Map([[await hashApiKey(KEY), { id: 'k1', tenant: 't1', name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false }]])
  const admit = async (_k: string, limit: number) => ({ success: true, limit, remaining: limit, resetAtMs: NOW + 1000 })
  const limiter: RateLimiter = { checkRequests: admit, chargeTokens: admit, peekTokens: admit, refundTokens: async () => {}, failureCount: () => 0 }
  const h = {
    nodes: [node('use-1'), node('use-2')],
    /** Node ids that answer 503. */
    full: new Set<string>(),
    /** Streams held open until `release()`. */
    held: [] as Array<() => void>,
    hold: false,
    samples: [] as LatencySample[],
    release() {
      for (const end of h.held.splice(0)) end()
    },
    /** Turn 1 of a conversation opened with `content`, or a later turn with `history` after it. */
    chat: (content: string, extra: Record<string, unknown> = {}, history: Array<{ role: string; content: string }> = []) =>
      app.request('/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content }, ...history], max_tokens: 4, stream: true, ...extra }),
      }),
  }
  const upstream: UpstreamFetch = async (url) => {
    const id = new URL(url).hostname.replace('.test', '')
    if (h.full.has(id)) return new Response(JSON.stringify({ error: { message: 'full' } }), { status: 503, headers: { 'retry-after-ms': '100' } })
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(`data: ${JSON.stringify({ node: id })}\n\n`))
        // A whole stream ends with its final frame: one closed without it is a node that died, and is resumed.
        const end = () => {
          controller.enqueue(new TextEncoder().encode('data: [DONE]\n\n'))
          controller.close()
        }
        if (h.hold) h.held.push(end)
        else end()
      },
    })
    return new Response(body, { headers: { 'content-type': 'text/event-stream', 'x-node': id } })
  }
  const app = createApp({
    config,
    keys: createMemoryKeyStore(records),
    limiter,
    registry: { table: async () => ({ nodes: h.nodes, source: 'registry', fetchedAtMs: NOW }), markDown: () => {} },
    upstream,
    latency: { record: async (s) => void h.samples.push(s) },
    now: () => NOW,
  })
  return h
}

const nodeOf = (res: Response) => res.headers.get('x-node')

describe('cache-affine placement through the app', () => {
  it('sends every turn of a conversation to one node, says so in x-zl-affinity and the latency record', async () => {
    const h = await harness()
    const first = await h.chat('Plan a trip to Lisbon.')
    await first.text()
    expect(first.headers.get('x-zl-affinity')).toBe('hit')
    const history: Array<{ role: string; content: string }> = []
    for (let turn = 2; turn <= 4; turn++) {
      history.push({ role: 'assistant', content: `answer ${turn - 1}` }, { role: 'user', content: `follow-up ${turn}` })
      const res = await h.chat('Plan a trip to Lisbon.', {}, history)
      await res.text()
      expect(nodeOf(res)).toBe(nodeOf(first))
      expect(res.headers.get('x-zl-affinity')).toBe('hit')
    }
    await expect.poll(() => h.samples.length).toBe(4)
    expect(h.samples.map((s) => s.affinity)).toEqual(['hit', 'hit', 'hit', 'hit'])
  })

  it('routes as before with AFFINITY=off: header and record say none', async () => {
    const h = await harness({ AFFINITY: 'off' })
    const res = await h.chat('Plan a trip to Lisbon.')
    await res.text()
    expect(res.headers.get('x-zl-affinity')).toBe('none')
    await expect.poll(() => h.samples.map((s) => s.affinity)).toEqual(['none'])
  })

  it('calls a failover away from the chosen node "moved", and remembers the node that answered', async () => {
    const h = await harness()
    const first = await h.chat('conversation A')
    await first.text()
    const home = nodeOf(first)!
    h.full.add(home)
    const second = await h.chat('conversation A')
    await second.text()
    expect(second.headers.get('x-zl-failover')).toBe('1')
    expect(second.headers.get('x-zl-affinity')).toBe('moved')
    h.full.clear()
    // Its prefix now lives where it was last served.
    const third = await h.chat('conversation A')
    await third.text()
    expect(nodeOf(third)).toBe(nodeOf(second))
    expect(nodeOf(third)).not.toBe(home)
    expect(third.headers.get('x-zl-affinity')).toBe('hit')
  })

  it('spreads a burst of 64 requests on one prompt_cache_key over both nodes within 1.5 × the mean, before any heartbeat shows them', async () => {
    const h = await harness()
    h.hold = true
    const responses = await Promise.all(Array.from({ length: 64 }, (_, i) => h.chat(`user ${i}`, { prompt_cache_key: 'one-hot-app' })))
    const counts = new Map<string, number>()
    for (const r of responses) counts.set(nodeOf(r)!, (counts.get(nodeOf(r)!) ?? 0) + 1)
    expect([...counts.keys()].sort()).toEqual(['use-1', 'use-2'])
    expect(Math.max(...counts.values()) / 32).toBeLessThanOrEqual(1.5)
    expect(new Set(responses.map((r) => r.headers.get('x-zl-affinity')))).toEqual(new Set(['hit', 'spread']))
    h.hold = false
    h.release()
    await Promise.all(responses.map((r) => r.text()))
    // Once they ended, the key goes home again.
    const after = await h.chat('user 0', { prompt_cache_key: 'one-hot-app' })
    await after.text()
    expect(after.headers.get('x-zl-affinity')).toBe('hit')
  })
})
