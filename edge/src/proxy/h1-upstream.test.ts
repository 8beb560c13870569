/**
 * The Node edge's HTTP/1.1 upstream (its own region's nodes) against a real node:http server,
 * with the h2 upstream's contract: a body nobody has asked for yet pauses the socket (the server's
 * writes back up) and comes whole once read; no headers in time is an UpstreamTimeout, and the
 * node sees that request's connection close; the client leaving ends the wait (not a timeout) and,
 * mid-body, closes the node's response (so generation stops there); a body cut mid-way errors;
 * connections are kept alive and reused, opened ahead of need by `warm`; header names come
 * lower-cased; https speaks HTTP/1.1 by ALPN.
 */
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo, Socket } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeSelfSignedCert } from '../../../test/support/self-signed-cert.ts'
import { expectHeldBackThenWhole, expectPatternedBody, freshSentLog, waitFor, writePatternedBody, type SentLog } from '../../../test/support/upstream-body.ts'
import { UpstreamTimeout, type UpstreamResponse } from './upstream-fetch.ts'
import { createH1Upstream } from './h1-upstream.ts'
import type { EdgeUpstream } from './upstream-common.ts'

let server: http.Server
let origin: string
let upstream: EdgeUpstream
/** The server's view of /big's current response. */
let sent: SentLog = freshSentLog()
/** Requests the server never answers or answers slowly, and how many of their responses closed before they finished. */
const seen = { hung: 0, slow: 0, closedEarly: 0, connections: 0 }

beforeAll(async () => {
  server = http.createServer((req, res) => {
    req.resume()
    res.once('close', () => {
      if (!res.writableFinished) seen.closedEarly++
    })
    if (req.url === '/hang') return void seen.hung++
    if (req.url === '/slow') {
      // A token stream that goes on until its client leaves.
      seen.slow++
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: 1\n\n')
      const timer = setInterval(() => res.write('data: more\n\n'), 20)
      res.once('close', () => clearInterval(timer))
      return
    }
    if (req.url === '/cut') {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: 1\n\n')
      // The node dies mid-body: the connection goes, the chunked body never ends.
      return void setImmediate(() => req.socket.destroy())
    }
    if (req.url === '/healthz') return res.end('ok')
    if (req.url === '/headers') {
      res.setHeader('X-Mixed-Case', 'yes')
      res.setHeader('Set-Cookie', ['a=1', 'b=2'])
      return res.end('ok')
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    writePatternedBody(res, sent)
  })
  server.on('connection', () => seen.connections++)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  upstream = createH1Upstream({ connectTimeoutMs: 2000 })
})

afterAll(async () => {
  await upstream?.close()
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

const collect = (res: UpstreamResponse) =>
  new Promise<{ text: string; ended: 'end' | 'error' }>((resolve) => {
    let text = ''
    res.pushTo!({ chunk: (b) => ((text += Buffer.from(b).toString()), true), end: () => resolve({ text, ended: 'end' }), error: () => resolve({ text, ended: 'error' }) })
  })

describe('the h1 upstream answer', () => {
  for (const read of ['arrayBuffer', 'body'] as const) {
    it(`holds back a body nobody reads yet, then delivers all of it (${read})`, async () => {
      sent = freshSentLog()
      await expectHeldBackThenWhole(await upstream.fetch(`${origin}/big`, { method: 'POST', body: '{}' }), sent, read)
    })
  }

  it('errors a body the node cut off mid-way, and ends a whole one', async () => {
    expect(await collect(await upstream.fetch(`${origin}/cut`, { method: 'POST', body: '{}' }))).toEqual({ text: 'data: 1\n\n', ended: 'error' })
    expect(await collect(await upstream.fetch(`${origin}/headers`, { method: 'GET' }))).toEqual({ text: 'ok', ended: 'end' })
  })

  it('hands the headers over with lower-case names, repeated ones each', async () => {
    const res = await upstream.fetch(`${origin}/headers`, { method: 'GET' })
    await res.arrayBuffer()
    expect(res.headers.get('x-mixed-case')).toBe('yes')
    expect(res.headers.get('set-cookie')).toBe('a=1, b=2')
    const names: string[] = []
    res.headers.forEach((_v, name) => names.push(name))
    expect(names).toContain('x-mixed-case')
    expect(names.filter((n) => n === 'set-cookie')).toHaveLength(2)
    expect(names.every((n) => n === n.toLowerCase())).toBe(true)
  })
})

describe('the h1 upstream timeout and cancel', () => {
  it('rejects with UpstreamTimeout when no headers came in time, and closes that request at the node', async () => {
    const before = { ...seen }
    const startedAt = Date.now()
    const err = await upstream.fetch(`${origin}/hang`, { method: 'POST', body: '{}', headersTimeoutMs: 200 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(UpstreamTimeout)
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(195)
    expect(seen.hung).toBe(before.hung + 1)
    await waitFor(() => seen.closedEarly === before.closedEarly + 1)
    sent = freshSentLog()
    expectPatternedBody(new Uint8Array(await (await upstream.fetch(`${origin}/big`, { method: 'POST', body: '{}', headersTimeoutMs: 2000 })).arrayBuffer()))
  })

  it("ends the wait when the client leaves, as the client's abort and not as a timeout", async () => {
    const before = { ...seen }
    const client = new AbortController()
    const pending = upstream.fetch(`${origin}/hang`, { method: 'POST', body: '{}', headersTimeoutMs: 10_000, signal: client.signal }).catch((e: unknown) => e)
    await waitFor(() => seen.hung === before.hung + 1)
    const startedAt = Date.now()
    client.abort(new Error('client left'))
    const err = await pending
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(UpstreamTimeout)
    expect(Date.now() - startedAt).toBeLessThan(1000)
    await waitFor(() => seen.closedEarly === before.closedEarly + 1)
  })

  it('closes the node’s response when the client leaves mid-stream, and the stream errors', async () => {
    const before = { ...seen }
    const client = new AbortController()
    const res = await upstream.fetch(`${origin}/slow`, { method: 'POST', body: '{}', signal: client.signal })
    const got = collect(res)
    await waitFor(() => seen.slow === before.slow + 1)
    client.abort(new Error('client left'))
    expect((await got).ended).toBe('error')
    // The node's response closed before it finished: this is what stops generation there.
    await waitFor(() => seen.closedEarly === before.closedEarly + 1)
  })
})

describe('the h1 upstream connections', () => {
  it('keeps connections alive for requests one after another, one opened ahead of need by warm', async () => {
    const up = createH1Upstream({ connectTimeoutMs: 2000 })
    try {
      const before = seen.connections
      await up.warm([origin])
      expect(seen.connections).toBe(before + 1)
      expect(up.connected()).toEqual([origin])
      // Already connected: warming again opens nothing.
      await up.warm([origin])
      for (let i = 0; i < 10; i++) await (await up.fetch(`${origin}/headers`, { method: 'GET' })).arrayBuffer()
      // Kept alive, not one per request. (undici's pool may open a second: a request sent the
      // moment the previous answer ended can find that connection not yet marked free.)
      expect(seen.connections - before).toBeLessThanOrEqual(2)
    } finally {
      await up.close()
    }
  })

  it('speaks HTTP/1.1 over TLS to an https node', async () => {
    const cert = makeSelfSignedCert()
    const versions: string[] = []
    const tlsServer = https.createServer({ key: cert.key, cert: cert.cert }, (req, res) => {
      versions.push(`${req.httpVersion} ${(req.socket as Socket & { alpnProtocol?: string | false }).alpnProtocol}`)
      res.end('secure')
    })
    await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve))
    const up = createH1Upstream({ connectTimeoutMs: 2000, tls: { ca: cert.cert } })
    try {
      const res = await up.fetch(`https://127.0.0.1:${(tlsServer.address() as AddressInfo).port}/x`, { method: 'GET' })
      expect(Buffer.from(await res.arrayBuffer()).toString()).toBe('secure')
      expect(versions).toHaveLength(1)
      expect(versions[0]).toMatch(/^1\.1 /)
    } finally {
      await up.close()
      tlsServer.closeAllConnections()
      await new Promise<void>((resolve) => tlsServer.close(() => resolve()))
    }
  })
})
