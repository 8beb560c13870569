/**
 * Routing and pass-through inside workerd against the stand-in fleet (DESIGN.md §3 steps 5–6,
 * §5): nearest region, failover before the first byte, a mid-stream failure ending in one
 * dialect error event, client disconnects reaching the node, and the Redis node table.
 */
import { SELF } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { createNodeRegistry } from '../../src/routing/node-registry.ts'
import { appWith, chatBody, createKey, edgeRequest, messagesBody, REGION_COORDS, received, script, testEnv, testRedis, uniqueRequestId, waitFor, type RegionId } from './harness.ts'

const REGIONS = Object.keys(REGION_COORDS) as RegionId[]
const fleet = () => JSON.parse(testEnv.GPU_NODES as string) as { id: string; url: string; region: string; lat: number; lon: number; models: string[] }[]

/** A client a few hundred km from a region's node. */
const near = (r: RegionId) => ({ lat: REGION_COORDS[r].lat + 1.5, lon: REGION_COORDS[r].lon - 2 })

describe('nearest node', () => {
  for (const region of REGIONS) {
    it(`routes a client near ${region} (request.cf) to ${region}`, async () => {
      const { key } = await createKey()
      const { lat, lon } = near(region)
      const res = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key }), { cf: { latitude: String(lat), longitude: String(lon) } })
      await res.arrayBuffer()
      expect(res.status).toBe(200)
      expect(res.headers.get('x-zl-region')).toBe(region)
    })
  }

  it('honours x-zl-client-geo only with DEV_MODE', async () => {
    const { key } = await createKey()
    const dev = await SELF.fetch(edgeRequest('/v1/messages', messagesBody(), { key, geo: near('ap-south') }))
    await dev.arrayBuffer()
    expect(dev.headers.get('x-zl-region')).toBe('ap-south')
    // Without DEV_MODE the header is ignored: no cf either, so the edge's own location (us-east) decides.
    const prod = appWith({ DEV_MODE: '0', EDGE_LAT: '39.0', EDGE_LON: '-77.5' })
    const res = await prod.fetch(edgeRequest('/v1/messages', messagesBody(), { key, geo: near('ap-south') }))
    await res.arrayBuffer()
    expect(res.headers.get('x-zl-region')).toBe('us-east')
  })
})

/** Asks until a request is served (bounded: 40 tries, each after the retry-after-ms it was given). */
async function firstServed(app: ReturnType<typeof appWith>, request: () => Request): Promise<Response | undefined> {
  for (let i = 0; i < 40; i++) {
    const res = await app.fetch(request())
    if (res.status === 200) return res
    await new Promise((r) => setTimeout(r, Math.max(10, Number(res.headers.get('retry-after-ms')) || 50)))
  }
  return undefined
}

describe('failover before the first byte', () => {
  it('moves on when the nearest node refuses connections, then skips it while it is marked down', async () => {
    const dead = { id: 'eu-west-dead', url: testEnv.TEST_DEAD_URL, region: 'eu-west-dead', lat: 53.3, lon: -6.3, models: ['tiny'] }
    const app = appWith({ GPU_NODES: JSON.stringify([dead, ...fleet()]) })
    const { key } = await createKey()
    const first = await app.fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, geo: REGION_COORDS['eu-west'] }))
    expect(await first.text()).toContain('[DONE]')
    expect(first.headers.get('x-zl-failover')).toBe('1')
    expect(first.headers.get('x-zl-region')).toBe('eu-west')
    const second = await app.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key, geo: REGION_COORDS['eu-west'] }))
    await second.arrayBuffer()
    expect(second.headers.get('x-zl-failover')).toBeNull()
    const regions = (await (await app.fetch(edgeRequest('/v1/regions', undefined, { key: testEnv.ADMIN_TOKEN }))).json()) as any
    expect(regions.nodes.find((n: any) => n.id === 'eu-west-dead')).toMatchObject({ down: true, url: testEnv.TEST_DEAD_URL })
  })

  it('moves on when the nearest node answers 503, to the next nearest', async () => {
    const app = appWith()
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'eu-west': '503' })
    const res = await app.fetch(edgeRequest('/v1/messages', messagesBody({ stream: true }), { key, requestId, geo: REGION_COORDS['eu-west'] }))
    const text = await res.text()
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-failover')).toBe('1')
    expect(res.headers.get('x-zl-region')).toBe('us-east')
    expect(text).toContain('event: message_stop')
    expect((await received(requestId)).map((r) => r.node)).toEqual(['eu-west', 'us-east'])
  })

  it('moves on when the nearest node does not answer within UPSTREAM_CONNECT_TIMEOUT_MS', async () => {
    const app = appWith({ UPSTREAM_CONNECT_TIMEOUT_MS: '300' })
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'ap-south': 'hang' })
    const started = Date.now()
    const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, requestId, geo: REGION_COORDS['ap-south'] }))
    await res.arrayBuffer()
    expect(res.headers.get('x-zl-failover')).toBe('1')
    expect(res.headers.get('x-zl-region')).not.toBe('ap-south')
    expect(Date.now() - started).toBeLessThan(2000)
    // The abandoned attempt was cancelled, not left hanging at the node.
    await waitFor(requestId, 'clientClosed', 'ap-south')
  })

  it('passes the last overload answer through when every node is full', async () => {
    const app = appWith()
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': '503', 'eu-west': '503', 'ap-south': '503' })
    const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key, requestId }))
    expect(res.status).toBe(503)
    expect(res.headers.get('x-zl-failover')).toBe('2')
    expect(res.headers.get('retry-after-ms')).toBe('250')
    expect(((await res.json()) as any).error.type).toBe('server_error')
  })

  it('while every node is full, answers overloaded with the wait left (not 502), and asks the nodes again once their retry hint has passed', async () => {
    const app = appWith()
    const { key } = await createKey()
    const full = uniqueRequestId()
    await script(full, { 'us-east': '503', 'eu-west': '503', 'ap-south': '503' })
    const first = await app.fetch(edgeRequest('/v1/messages', messagesBody(), { key, requestId: full }))
    expect(first.status).toBe(529)
    const fullAt = Date.now()
    // The next request, within the nodes' 250 ms: refused by the edge itself, in the dialect, with what is left of the wait.
    const next = uniqueRequestId()
    const refused = await app.fetch(edgeRequest('/v1/messages', messagesBody(), { key, requestId: next }))
    const wait = Number(refused.headers.get('retry-after-ms'))
    if (Date.now() - fullAt < 200) {
      expect(refused.status).toBe(529)
      expect(((await refused.json()) as any).error.type).toBe('overloaded_error')
      expect(wait).toBeGreaterThan(0)
      expect(wait).toBeLessThanOrEqual(250)
      expect(await received(next)).toEqual([])
    } else await refused.arrayBuffer()
    // After the hint (not the 10 s mark-down of a failed node), a request is served: bounded polling.
    const served = await firstServed(app, () => edgeRequest('/v1/messages', messagesBody(), { key }))
    expect(served?.status).toBe(200)
    expect(Date.now() - fullAt).toBeLessThan(2000)
  })

  it('answers overloaded with retry-after-ms (not 502) when every node is too slow to answer, and then skips them briefly as busy', async () => {
    const app = appWith({ UPSTREAM_CONNECT_TIMEOUT_MS: '300' })
    const { key } = await createKey()
    const slow = uniqueRequestId()
    await script(slow, { 'us-east': 'hang', 'eu-west': 'hang', 'ap-south': 'hang' })
    const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, requestId: slow }))
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after-ms')).toBe('300')
    expect(((await res.json()) as any).error.code).toBe('overloaded')
    const slowAt = Date.now()
    // Within the timeout's length the edge answers at once, in the dialect, without asking the nodes.
    const next = uniqueRequestId()
    const refused = await app.fetch(edgeRequest('/v1/messages', messagesBody(), { key, requestId: next }))
    if (Date.now() - slowAt < 250) {
      expect(refused.status).toBe(529)
      expect(Number(refused.headers.get('retry-after-ms'))).toBeGreaterThan(0)
      expect(await received(next)).toEqual([])
    } else await refused.arrayBuffer()
    // Not the 10 s mark-down of a dead node: served again soon after (bounded polling).
    const served = await firstServed(app, () => edgeRequest('/v1/chat/completions', chatBody(), { key }))
    expect(served?.status).toBe(200)
    expect(Date.now() - slowAt).toBeLessThan(2000)
  })

  it('hedges a stream whose node is silent past the timeout: the next nodes are asked beside it, and its late answer is taken', async () => {
    // us-east answers at LATE_MS (400 ms), after the 300 ms timeout; the others never answer.
    // Given up at 300 ms, as before, this request found every node slow and got 503 at 900 ms.
    const app = appWith({ UPSTREAM_CONNECT_TIMEOUT_MS: '300' })
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'late', 'eu-west': 'hang', 'ap-south': 'hang' })
    const t0 = Date.now()
    const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, requestId, geo: REGION_COORDS['us-east'] }))
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-region')).toBe('us-east')
    expect(res.headers.get('x-zl-failover')).toBeNull()
    expect(await res.text()).toMatch(/data: \[DONE\]\n\n$/)
    expect(Date.now() - t0).toBeLessThan(900)
    // eu-west was asked beside it (at 300 ms), and its request closed once us-east's answer was taken.
    expect((await waitFor(requestId, 'clientClosed', 'eu-west')).completed).toBe(false)
  })

  it('answers 502 in the dialect when no node can be reached', async () => {
    const dead = (id: string) => ({ id, url: testEnv.TEST_DEAD_URL, region: id, lat: 0, lon: 0, models: ['tiny'] })
    const app = appWith({ GPU_NODES: JSON.stringify([dead('a'), dead('b')]) })
    const { key } = await createKey()
    const res = await app.fetch(edgeRequest('/v1/messages', messagesBody(), { key }))
    expect(res.status).toBe(502)
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('No GPU node') } })
  })
})

describe('pass-through', () => {
  it('returns the node body bytes unchanged', async () => {
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    const res = await SELF.fetch(edgeRequest('/v1/completions', JSON.stringify({ model: 'tiny', prompt: 'hi', max_tokens: 4, stream: true }), { key, requestId }))
    const text = await res.text()
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    expect(res.headers.get('x-accel-buffering')).toBe('no')
    expect(text.startsWith('data: {"id":"cmpl-')).toBe(true)
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true)
  })

  for (const [dialect, path, body, errorFrame] of [
    ['OpenAI', '/v1/chat/completions', chatBody({ stream: true }), /\ndata: \{"error":\{"message":"The GPU node failed while streaming this response\.","type":"server_error","param":null,"code":"upstream_unavailable"\}\}\n\n$/],
    ['Anthropic', '/v1/messages', messagesBody({ stream: true }), /\nevent: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The GPU node failed while streaming this response\."\}\}\n\n$/],
  ] as const) {
    it(`ends a stream that breaks mid-way with one ${dialect} error event`, async () => {
      const { key } = await createKey()
      const requestId = uniqueRequestId()
      await script(requestId, { 'us-east': 'break', 'eu-west': 'break', 'ap-south': 'break' })
      const res = await SELF.fetch(edgeRequest(path, body, { key, requestId }))
      expect(res.status).toBe(200)
      const text = await res.text()
      expect(text).toContain('hello')
      expect(text).toMatch(errorFrame)
      expect(text.match(/"error"/g)).toHaveLength(dialect === 'OpenAI' ? 1 : 2) // Anthropic: `type: "error"` + `error: {…}`
    })
  }
})

describe('non-streaming answers', () => {
  it('are asked again on the next node when one breaks off mid-document (the client saw nothing)', async () => {
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'break' })
    const res = await SELF.fetch(edgeRequest('/v1/messages', messagesBody(), { key, requestId, geo: REGION_COORDS['us-east'] }))
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-failover')).toBe('1')
    expect(res.headers.get('x-zl-region')).not.toBe('us-east')
    expect(await res.json()).toMatchObject({ type: 'message', content: [{ type: 'text', text: expect.stringMatching(/^hello from (eu-west|ap-south)$/) }] })
    expect((await received(requestId)).map((r) => r.node)[0]).toBe('us-east')
  })

  it('are taken whole: a node that breaks off mid-document gives a clean 502, never a truncated body', async () => {
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'break', 'eu-west': 'break', 'ap-south': 'break' })
    const res = await SELF.fetch(edgeRequest('/v1/messages', messagesBody(), { key, requestId }))
    expect(res.status).toBe(502)
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('failed while sending') } })
  })
})

describe('client disconnect', () => {
  it('closes the node stream when the client cancels the body', async () => {
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'slow', 'eu-west': 'slow', 'ap-south': 'slow' })
    const res = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, requestId }))
    const reader = res.body!.getReader()
    await reader.read()
    await reader.cancel()
    const seen = await waitFor(requestId, 'clientClosed')
    expect(seen.completed).toBe(false)
  })

  it('closes the node stream when the client aborts the request', async () => {
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'slow', 'eu-west': 'slow', 'ap-south': 'slow' })
    const controller = new AbortController()
    const res = await SELF.fetch(edgeRequest('/v1/messages', messagesBody({ stream: true }), { key, requestId, signal: controller.signal }))
    const reader = res.body!.getReader()
    await reader.read()
    controller.abort()
    await reader.read().catch(() => {})
    const seen = await waitFor(requestId, 'clientClosed')
    expect(seen.completed).toBe(false)
  })
})

describe('client disconnect, through the edge code alone', () => {
  // Called in-isolate (no workerd connection to tear down) with a latency recorder holding the
  // request open in waitUntil: only the edge's own cancel path can reach the node here.
  const latency = { record: async () => {} }

  it('cancels the upstream body when the response body is cancelled', async () => {
    const app = appWith({}, { latency })
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'slow', 'eu-west': 'slow', 'ap-south': 'slow' })
    const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, requestId }))
    const reader = res.body!.getReader()
    await reader.read()
    await reader.cancel()
    expect((await waitFor(requestId, 'clientClosed')).completed).toBe(false)
  })

  it('aborts the upstream fetch when the request signal fires', async () => {
    const app = appWith({}, { latency })
    const { key } = await createKey()
    const requestId = uniqueRequestId()
    await script(requestId, { 'us-east': 'slow', 'eu-west': 'slow', 'ap-south': 'slow' })
    const controller = new AbortController()
    const res = await app.fetch(edgeRequest('/v1/messages', messagesBody({ stream: true }), { key, requestId, signal: controller.signal }))
    await res.body!.getReader().read()
    controller.abort()
    expect((await waitFor(requestId, 'clientClosed')).completed).toBe(false)
  })
})

describe('node table from Redis heartbeats', () => {
  it('routes from fresh rows, skipping draining and stale nodes, and shows the table', async () => {
    const nodesKey = `zl:nodes:test:${crypto.randomUUID()}`
    const now = Date.now()
    const row = (id: RegionId, extra: Record<string, unknown>) => {
      const n = fleet().find((f) => f.id === id)!
      return JSON.stringify({ ...n, maxBatch: 32, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 100, draining: false, ts: now, ...extra })
    }
    const redis = testRedis()
    await redis.hset(nodesKey, {
      'us-east': row('us-east', { draining: true }),
      'eu-west': row('eu-west', { prefixHitRate: 0.42, prefillTokPerSec: 2000 }),
      'ap-south': row('ap-south', { ts: now - 60_000 }),
    })
    const registry = createNodeRegistry({ redis, fallback: [], nodesKey })
    const app = appWith({}, { registry })
    const { key } = await createKey()
    for (const region of REGIONS) {
      const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key, geo: REGION_COORDS[region] }))
      await res.arrayBuffer()
      expect(res.headers.get('x-zl-region')).toBe('eu-west')
    }
    const table = (await (await app.fetch(edgeRequest('/v1/regions', undefined, { key }))).json()) as any
    expect(table.source).toBe('registry')
    expect(table.nodes.map((n: any) => [n.id, n.fresh, n.draining])).toEqual([['ap-south', false, false], ['eu-west', true, false], ['us-east', true, true]])
    expect(table.nodes[0].url).toBeUndefined() // node URLs are for the admin token only
    // The prefix-cache figures a node publishes, null where it publishes none.
    expect(table.nodes.map((n: any) => [n.id, n.prefixHitRate, n.prefillTokPerSec])).toEqual([['ap-south', null, null], ['eu-west', 0.42, 2000], ['us-east', null, null]])
    await redis.del(nodesKey)
  })

  it('falls back to GPU_NODES when the table is empty or Redis is unreachable', async () => {
    const { key } = await createKey()
    for (const redis of [testRedis(), { hgetall: () => Promise.reject(new Error('down')) }]) {
      const registry = createNodeRegistry({ redis, fallback: fleet(), nodesKey: `zl:nodes:test:${crypto.randomUUID()}` })
      const app = appWith({}, { registry })
      const res = await app.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key, geo: REGION_COORDS['ap-south'] }))
      await res.arrayBuffer()
      expect(res.headers.get('x-zl-region')).toBe('ap-south')
      const table = (await (await app.fetch(edgeRequest('/v1/regions', undefined, { key }))).json()) as any
      expect(table.source).toBe('static')
    }
  })

  it('refuses /v1/regions without a key or admin token', async () => {
    const res = await SELF.fetch(edgeRequest('/v1/regions', undefined))
    expect(res.status).toBe(401)
  })
})
