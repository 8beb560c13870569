/**
 * The same app under the Node entry (@hono/node-server), with undici's HTTP/2 upstream against
 * h2c stand-in nodes: many concurrent streams share ONE connection per node, a client that
 * leaves closes its node stream, and TLS serves h2 and HTTP/1.1 by ALPN.
 */
import http from 'node:http'
import http2 from 'node:http2'
import https from 'node:https'
import type { TLSSocket } from 'node:tls'
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeSelfSignedCert, type TestCert } from '../../../test/support/self-signed-cert.ts'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { parseEdgeConfig, type EdgeConfig } from '../../src/config.ts'
import { CLIENT_KEEP_ALIVE_MS, startNodeEdge, type NodeEdge } from '../../src/entries/node-server.ts'
import { startFleet, type Fleet } from '../support/stand-in-fleet.ts'
import { FIREHOSE_FRAME_PAYLOAD, FIREHOSE_FRAMES, FIREHOSE_JSON_TEXT, FLOOD_FRAMES, type Mode, type Received } from '../support/stand-in-node.ts'

const SECRET = 'zl-test-edge-secret-0123456789'
const US_EAST = '39.0,-77.5'

let upstash: LocalUpstash
let fleet: Fleet
let edge: NodeEdge
let config: EdgeConfig
let key: string

beforeAll(async () => {
  ;[upstash, fleet] = await Promise.all([startLocalUpstash(), startFleet({ secret: SECRET, protocol: 'h2c' })])
  config = parseEdgeConfig({
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: SECRET,
    GPU_NODES: JSON.stringify(fleet.gpuNodes),
    DEV_MODE: '1',
    REQUEST_LOG: '0',
    DEFAULT_RPM: '100000',
    DEFAULT_TPM: '100000000',
  })
  edge = await startNodeEdge(config, { host: '127.0.0.1', port: 0 })
  key = generateApiKey()
  const redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false })
  await redis.hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: 'node-test', tenant: 'test', name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false }))
})

afterAll(async () => {
  await edge?.close()
  await fleet?.close()
  await upstash?.stop()
})

async function control(path: string, init?: RequestInit): Promise<Response> {
  return fetch(`${fleet.controlUrl}${path}`, init)
}

async function script(requestId: string, modes: Record<string, Mode>): Promise<void> {
  await (await control('/script', { method: 'POST', body: JSON.stringify({ requestId, modes }) })).arrayBuffer()
}

async function waitFor(requestId: string, until: 'received' | 'clientClosed'): Promise<{ completed: boolean }> {
  const res = await control(`/wait?${new URLSearchParams({ requestId, until })}`)
  expect(res.status, `${until} for ${requestId}`).toBe(200)
  return (await res.json()) as { completed: boolean }
}

function chat(requestId: string, signal?: AbortSignal, stream = true): Promise<Response> {
  return fetch(`${edge.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': requestId, 'x-zl-client-geo': US_EAST },
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream }),
    ...(signal ? { signal } : {}),
  })
}

describe('Node entry over an HTTP/2 upstream', () => {
  it('keeps an idle HTTP/1.1 client connection open well past Node\'s 5 s default', async () => {
    const keepAlive = await new Promise<unknown>((resolve, reject) => {
      const req = http.get(`${edge.url}/healthz`, { agent: new http.Agent({ keepAlive: true }) }, (res) => {
        res.resume()
        res.on('end', () => resolve(res.headers['keep-alive']))
      })
      req.on('error', reject)
    })
    expect(CLIENT_KEEP_ALIVE_MS).toBeGreaterThan(60_000)
    expect(keepAlive).toBe(`timeout=${CLIENT_KEEP_ALIVE_MS / 1000}`)
  })

  it('answers 401 naming both headers when Authorization and x-api-key carry different keys, whichever is valid; the same key in both is served', async () => {
    const other = 'zl-' + 'B'.repeat(32)
    const ask = (path: string, body: unknown, headers: Record<string, string>) =>
      fetch(`${edge.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-zl-client-geo': US_EAST, ...headers }, body: JSON.stringify(body) })
    const routes = [
      { path: '/v1/chat/completions', body: { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 } },
      { path: '/v1/completions', body: { model: 'tiny', prompt: 'hi', max_tokens: 4 } },
      { path: '/v1/messages', body: { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 } },
    ]
    for (const { path, body } of routes) {
      for (const [i, headers] of [{ authorization: `Bearer ${key}`, 'x-api-key': other }, { authorization: `Bearer ${other}`, 'x-api-key': key }].entries()) {
        const res = await ask(path, body, headers)
        const text = await res.text()
        expect(res.status, `${path}, pair ${i}`).toBe(401)
        expect(text).toMatch(/Authorization.*x-api-key/)
        expect(text).not.toContain(key)
        expect(text).not.toContain(other)
      }
      const same = await ask(path, body, { authorization: `Bearer ${key}`, 'x-api-key': key })
      await same.arrayBuffer()
      expect(same.status, `${path}: the same key in both headers`).toBe(200)
    }
  })

  it('streams a response through the h2c upstream', async () => {
    const res = await chat(`one-${crypto.randomUUID()}`)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-region')).toBe('us-east')
    // The region's one node is every key's ring home (the relayed stream keeps the edge's headers).
    expect(res.headers.get('x-zl-affinity')).toBe('hit')
    expect(await res.text()).toContain('data: [DONE]')
  })

  it('multiplexes many concurrent streams over one connection per node, and closes each node stream when its client leaves', async () => {
    const before = fleet.nodes[0]!.sessions()
    const ids = Array.from({ length: 24 }, (_, i) => `h2-${i}-${crypto.randomUUID()}`)
    await Promise.all(ids.map((id) => script(id, { 'us-east': 'slow' })))
    const clients = ids.map(() => new AbortController())
    const responses = await Promise.all(ids.map((id, i) => chat(id, clients[i]!.signal)))
    expect(responses.map((r) => r.status)).toEqual(ids.map(() => 200))
    // All 24 streams are open at the node at the same time…
    await Promise.all(ids.map((id) => waitFor(id, 'received')))
    // …over the one session the first test opened (or one new one if none existed yet).
    expect(fleet.nodes[0]!.sessions()).toBe(Math.max(before, 1))
    for (const c of clients) c.abort()
    const closed = await Promise.all(ids.map((id) => waitFor(id, 'clientClosed')))
    expect(closed.every((r) => !r.completed)).toBe(true)
    // One Agent per node: the one routed to, and those the edge connected to ahead of need.
    expect(edge.upstream.origins().sort()).toEqual(fleet.nodes.map((n) => new URL(n.url).origin).sort())
  })
})

describe('Node entry: a client that leaves before the node answered', () => {
  it('closes the node request it was waiting on (a JSON request whose node holds its headers)', async () => {
    const id = `gone-${crypto.randomUUID()}`
    await script(id, { 'us-east': 'hang' })
    const client = new AbortController()
    const answered = chat(id, client.signal, false)
    await waitFor(id, 'received')
    client.abort()
    await expect(answered).rejects.toThrow(/abort/i)
    // The edge's client signal (entries/client-signal.ts) ended the upstream request.
    expect((await waitFor(id, 'clientClosed')).completed).toBe(false)
  })
})

describe('Node entry when the h2c upstream fails or floods', () => {
  const everywhere = (mode: Mode) => Object.fromEntries(fleet.gpuNodes.map((n) => [n.id, mode]))

  it('ends a stream whose node breaks off mid-way with one dialect error event', async () => {
    const id = `break-${crypto.randomUUID()}`
    await script(id, everywhere('break'))
    const res = await chat(id)
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).toContain('hello')
    expect(text).toMatch(/\ndata: \{"error":\{"message":"The GPU node failed while streaming this response\.","type":"server_error","param":null,"code":"upstream_unavailable"\}\}\n\n$/)
    expect(text.match(/"error"/g)).toHaveLength(1)
  })

  it("passes a node's own JSON refusal of a stream request through as is (no relay: not an event stream)", async () => {
    const id = `refuse-${crypto.randomUUID()}`
    await script(id, everywhere('400'))
    const res = await chat(id)
    expect(res.status).toBe(400)
    expect(res.headers.get('content-type')).toContain('application/json')
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: 'stand-in refuses' } })
  })

  it('answers a clean 502 when a node breaks off mid-way through a JSON answer', async () => {
    const id = `break-json-${crypto.randomUUID()}`
    await script(id, everywhere('break'))
    const res = await chat(id, undefined, false)
    expect(res.status).toBe(502)
    expect(await res.json()).toMatchObject({ error: { type: 'server_error', code: 'upstream_unavailable' } })
  })

  it('asks the next node when one breaks off mid-way through a JSON answer (the client saw nothing)', async () => {
    const id = `break-json-once-${crypto.randomUUID()}`
    await script(id, { 'us-east': 'break' })
    const res = await chat(id, undefined, false)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-failover')).toBe('1')
    expect(res.headers.get('x-zl-region')).not.toBe('us-east')
    expect(await res.json()).toMatchObject({ object: 'chat.completion' })
  })

  it('takes a JSON answer of many pieces whole (pausing the node while it waits to be read)', async () => {
    const id = `big-json-${crypto.randomUUID()}`
    await script(id, everywhere('firehose'))
    const res = await chat(id, undefined, false)
    expect(res.status).toBe(200)
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> }
    expect(body.choices[0]!.message.content).toBe('~'.repeat(FIREHOSE_JSON_TEXT))
  })

  it('delivers a stream of thousands of frames sent at once intact and in order', async () => {
    const id = `flood-${crypto.randomUUID()}`
    await script(id, { 'us-east': 'flood' })
    const res = await chat(id)
    const reader = res.body!.getReader()
    const decoder = new TextDecoder()
    let text = ''
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      text += decoder.decode(value, { stream: true })
    }
    const ticks = [...text.matchAll(/ tick(\d+)/g)].map((m) => Number(m[1]))
    expect(ticks).toEqual(Array.from({ length: FLOOD_FRAMES }, (_, n) => n))
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true)
  })

  it('holds a node back while its client reads nothing (backpressure), then delivers every byte', async () => {
    const id = `firehose-${crypto.randomUUID()}`
    await script(id, { 'us-east': 'firehose' })
    const body = JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true })
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(`${edge.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': id, 'x-zl-client-geo': US_EAST } }, resolve)
      req.on('error', reject)
      req.end(body)
    })
    expect(res.statusCode).toBe(200)
    res.pause()
    // The node stalls: its writes have waited for 'drain' a while, and it has not finished.
    const stalled = await pollRecord(id, (r) => r.completed || (r.blockedSinceMs !== undefined && Date.now() - r.blockedSinceMs > 300))
    expect(stalled.completed).toBe(false)
    // What sits between node and client (HTTP/2 window, the edge's stream queue, socket buffers)
    // stays far below what the node had to send.
    expect(stalled.bytesWritten).toBeLessThan((FIREHOSE_FRAMES * FIREHOSE_FRAME_PAYLOAD) / 3)
    // Every frame's payload arrives: count its '~'s (nothing else in the stream has one).
    let tildes = 0
    let tail = ''
    for await (const chunk of res) {
      const bytes = chunk as Buffer
      for (let i = bytes.indexOf(0x7e); i !== -1; i = bytes.indexOf(0x7e, i + 1)) tildes++
      tail = (tail + bytes.toString('latin1')).slice(-64)
    }
    expect(tildes).toBe(FIREHOSE_FRAMES * FIREHOSE_FRAME_PAYLOAD)
    expect(tail.endsWith('data: [DONE]\n\n')).toBe(true)
  }, 30_000)
})

/** Polls the stand-in's record of a request until `done` holds (bounded: the test's timeout). */
async function pollRecord(requestId: string, done: (r: Received) => boolean): Promise<Received> {
  for (;;) {
    const [r] = (await (await control(`/received?${new URLSearchParams({ requestId })}`)).json()) as Received[]
    if (r && done(r)) return r
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe('Node entry with TLS_CERT/TLS_KEY', () => {
  let tls: TestCert
  let cert: string
  let tlsEdge: NodeEdge
  beforeAll(async () => {
    tls = makeSelfSignedCert()
    cert = tls.cert
    tlsEdge = await startNodeEdge(config, { host: '127.0.0.1', port: 0, tls: { certFile: tls.certFile, keyFile: tls.keyFile } })
  })
  afterAll(async () => {
    await tlsEdge?.close()
    tls.remove()
  })

  it('serves a stream over h2 (ALPN) without connection-level headers', async () => {
    const session = http2.connect(tlsEdge.url, { ca: cert })
    try {
      await new Promise<void>((resolve, reject) => session.once('connect', () => resolve()).once('error', reject))
      expect(session.alpnProtocol).toBe('h2')
      const req = session.request({
        ':method': 'POST', ':path': '/v1/messages', 'x-api-key': key, 'content-type': 'application/json', 'x-zl-client-geo': US_EAST,
      })
      req.end(JSON.stringify({ model: 'tiny', max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'hi' }] }))
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve) => req.once('response', resolve))
      let body = ''
      req.setEncoding('utf8')
      for await (const chunk of req) body += chunk
      expect(headers[':status']).toBe(200)
      expect(headers['transfer-encoding']).toBeUndefined()
      expect(body).toContain('event: message_stop')
    } finally {
      session.close()
    }
  })

  it('serves HTTP/1.1 clients on the same port', async () => {
    const got = await new Promise<{ status: number; alpn: string | false | null; keepAlive: unknown }>((resolve, reject) => {
      const req = https.get(`${tlsEdge.url}/healthz`, { ca: cert, agent: new https.Agent({ ALPNProtocols: ['http/1.1'], keepAlive: true }) }, (res) => {
        const alpn = (res.socket as TLSSocket).alpnProtocol
        res.resume()
        res.on('end', () => resolve({ status: res.statusCode ?? 0, alpn, keepAlive: res.headers['keep-alive'] }))
      })
      req.on('error', reject)
    })
    expect(got).toEqual({ status: 200, alpn: 'http/1.1', keepAlive: `timeout=${CLIENT_KEEP_ALIVE_MS / 1000}` })
  })
})
