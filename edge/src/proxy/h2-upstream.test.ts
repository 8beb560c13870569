/**
 * The Node edge's upstream against real node:http2 servers: a body nobody has asked for yet
 * pauses the HTTP/2 stream (the server's writes back up) instead of piling up in the edge, and
 * comes whole once read, as bytes or as a stream; a node that sends no headers in time gets its
 * stream reset and the caller an UpstreamTimeout, on a connection that goes on serving. The
 * connection's own cases: a body cut mid-way errors (node:http2 reports an end), a draining node
 * (GOAWAY) finishes its stream while a new connection is warmed, sessions are retired after their
 * share of streams, headers come without pseudo-headers, https speaks h2 by ALPN.
 */
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeSelfSignedCert } from '../../../test/support/self-signed-cert.ts'
import { expectHeldBackThenWhole, expectPatternedBody, freshSentLog, waitFor, writePatternedBody, type SentLog } from '../../../test/support/upstream-body.ts'
import { UpstreamTimeout, type UpstreamResponse } from './upstream-fetch.ts'
import { createH2Upstream } from './h2-upstream.ts'
import type { EdgeUpstream } from './upstream-common.ts'

let server: http2.Http2Server
let origin: string
let upstream: EdgeUpstream
let sent: SentLog = freshSentLog()
/** Requests to /hang, which are never answered, and how many of them the edge has closed. */
const hung = { received: 0, closed: 0 }

beforeAll(async () => {
  server = http2.createServer((req, res) => {
    if (req.url === '/hang') {
      hung.received++
      req.stream.once('close', () => hung.closed++)
      return
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    writePatternedBody(res, sent)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  upstream = createH2Upstream({ connectTimeoutMs: 2000 })
})

afterAll(async () => {
  await upstream?.close()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

describe('the h2 upstream answer', () => {
  for (const read of ['arrayBuffer', 'body'] as const) {
    it(`holds back a body nobody reads yet, then delivers all of it (${read})`, async () => {
      sent = freshSentLog()
      await expectHeldBackThenWhole(await upstream.fetch(`${origin}/x`, { method: 'POST', body: '{}' }), sent, read)
    })
  }
})

describe('the h2 upstream headers timeout', () => {

  it('rejects with UpstreamTimeout when no headers came in time, resets that stream, and keeps the connection serving', async () => {
    const before = { ...hung }
    const startedAt = Date.now()
    const err = await upstream.fetch(`${origin}/hang`, { method: 'POST', body: '{}', headersTimeoutMs: 200 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(UpstreamTimeout)
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(195)
    expect(hung.received).toBe(before.received + 1)
    await waitFor(() => hung.closed === before.closed + 1)
    sent = freshSentLog()
    const res = await upstream.fetch(`${origin}/x`, { method: 'POST', body: '{}', headersTimeoutMs: 2000 })
    expectPatternedBody(new Uint8Array(await res.arrayBuffer()))
  })

  it("ends the wait when the client leaves, as the client's abort and not as a timeout", async () => {
    const before = { ...hung }
    const client = new AbortController()
    const pending = upstream.fetch(`${origin}/hang`, { method: 'POST', body: '{}', headersTimeoutMs: 10_000, signal: client.signal }).catch((e: unknown) => e)
    await waitFor(() => hung.received === before.received + 1)
    const startedAt = Date.now()
    client.abort(new Error('client left'))
    const err = await pending
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(UpstreamTimeout)
    expect(Date.now() - startedAt).toBeLessThan(1000)
    await waitFor(() => hung.closed === before.closed + 1)
  })
})

/** A server for the connection's own cases, counting the sessions it has seen. */
async function listen(server: http2.Http2Server | http2.Http2SecureServer, scheme: 'http' | 'https'): Promise<{ origin: string; sessions: () => number; close: () => Promise<void> }> {
  let sessions = 0
  server.on('session', () => sessions++)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    origin: `${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sessions: () => sessions,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}

const collect = (res: UpstreamResponse) =>
  new Promise<{ bytes: number; ended: 'end' | 'error' }>((resolve) => {
    let bytes = 0
    res.pushTo!({ chunk: (b) => ((bytes += b.byteLength), true), end: () => resolve({ bytes, ended: 'end' }), error: () => resolve({ bytes, ended: 'error' }) })
  })

describe('the h2 upstream connection', () => {
  /** Each path's behaviour: answer at once, break off mid-body, or answer after the session was told to close. */
  let release: (() => void) | undefined
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    const path = headers[':path']
    if (path === '/empty') return stream.respond({ ':status': 204 })
    stream.respond({ ':status': 200, 'content-type': 'text/event-stream', 'set-cookie': ['a=1', 'b=2'] })
    stream.write('data: 1\n\n')
    // The connection dies: node:http2 still ends the client's readable side ('end').
    if (path === '/die') return setImmediate(() => stream.session?.destroy())
    // The node resets the stream mid-body.
    if (path === '/reset') return setImmediate(() => stream.destroy(new Error('node failed')))
    if (path === '/drain') {
      // GOAWAY to this session while the stream is open; the stream ends when the test says.
      stream.session?.close()
      release = () => stream.end('data: 2\n\n')
      return
    }
    stream.end('data: 2\n\n')
  })
  let srv: Awaited<ReturnType<typeof listen>>
  beforeAll(async () => {
    srv = await listen(server, 'http')
  })
  afterAll(async () => {
    await srv.close()
  })

  it('errors a body whose connection died or whose stream was reset mid-way, where node:http2 reports an end', async () => {
    const up = createH2Upstream({ connectTimeoutMs: 2000 })
    try {
      for (const path of ['/die', '/reset']) {
        const res = await up.fetch(`${srv.origin}${path}`, { method: 'POST', body: '{}' })
        expect(res.status).toBe(200)
        expect(await collect(res)).toEqual({ bytes: 9, ended: 'error' })
      }
      // The control: the same upstream reports a whole body as ended.
      expect(await collect(await up.fetch(`${srv.origin}/ok`, { method: 'POST', body: '{}' }))).toEqual({ bytes: 18, ended: 'end' })
    } finally {
      await up.close()
    }
  })

  it('lets a draining node (GOAWAY) finish its open stream, and warms a new connection for the requests after it', async () => {
    const up = createH2Upstream({ connectTimeoutMs: 2000 })
    try {
      const before = srv.sessions()
      const draining = await up.fetch(`${srv.origin}/drain`, { method: 'POST', body: '{}' })
      const body = collect(draining)
      await waitFor(() => release !== undefined && up.connected().length === 0)
      // The warm-up opens the successor ahead of need while the old session still carries its stream.
      await up.warm([srv.origin])
      expect(up.connected()).toEqual([srv.origin])
      const next = await up.fetch(`${srv.origin}/ok`, { method: 'POST', body: '{}' })
      expect(await collect(next)).toEqual({ bytes: 18, ended: 'end' })
      release!()
      expect(await body).toEqual({ bytes: 18, ended: 'end' })
      expect(srv.sessions()).toBe(before + 2)
    } finally {
      // A failed assertion must not leave the draining stream open (close() waits for it).
      release?.()
      release = undefined
      await up.close()
    }
  })

  it('opens a new connection once a session has carried its share of streams', async () => {
    const up = createH2Upstream({ connectTimeoutMs: 2000, streamsPerSession: 3 })
    try {
      const before = srv.sessions()
      for (let i = 0; i < 7; i++) expect(await collect(await up.fetch(`${srv.origin}/ok`, { method: 'POST', body: '{}' }))).toEqual({ bytes: 18, ended: 'end' })
      expect(srv.sessions()).toBe(before + 3)
    } finally {
      await up.close()
    }
  })

  it('warms a connection ahead of need, hands over the headers without pseudo-headers, and gives a 204 no body', async () => {
    const up = createH2Upstream({ connectTimeoutMs: 2000 })
    try {
      await up.warm([srv.origin])
      expect(up.connected()).toEqual([srv.origin])
      const before = srv.sessions()
      const res = await up.fetch(`${srv.origin}/ok`, { method: 'POST', body: '{}' })
      const seen: string[] = []
      res.headers.forEach((value, name) => seen.push(`${name}: ${value}`))
      // No pseudo-headers, and a repeated header once per value.
      expect(seen.filter((h) => !h.startsWith('date:'))).toEqual(['content-type: text/event-stream', 'set-cookie: a=1', 'set-cookie: b=2'])
      expect(res.headers.get('content-type')).toBe('text/event-stream')
      await res.arrayBuffer()
      const empty = await up.fetch(`${srv.origin}/empty`, { method: 'POST', body: '{}' })
      expect(empty.status).toBe(204)
      expect(empty.body).toBeNull()
      expect(srv.sessions()).toBe(before)
    } finally {
      await up.close()
    }
  })

  it('speaks h2 to an https node by ALPN', async () => {
    const cert = makeSelfSignedCert()
    const versions: string[] = []
    const tlsServer = http2.createSecureServer({ cert: cert.cert, key: cert.key, allowHTTP1: true }, (req, res) => {
      versions.push(req.httpVersion)
      res.end('ok')
    })
    const tlsSrv = await listen(tlsServer, 'https')
    const up = createH2Upstream({ connectTimeoutMs: 2000, tls: { ca: cert.cert } })
    try {
      const res = await up.fetch(`${tlsSrv.origin}/x`, { method: 'POST', body: '{}' })
      expect(new TextDecoder().decode(await res.arrayBuffer())).toBe('ok')
      expect(versions).toEqual(['2.0'])
    } finally {
      await up.close()
      await tlsSrv.close()
      cert.remove()
    }
  })
})
