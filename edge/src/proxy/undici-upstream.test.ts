/**
 * The Node upstream's answer object against a real h2c server: a body nobody has asked for yet
 * pauses the HTTP/2 stream (the server's writes back up) instead of piling up in the edge, and
 * comes whole once read, as bytes or as a stream; a node that sends no headers in time gets its
 * stream reset and the caller an UpstreamTimeout, on a connection that goes on serving.
 */
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { UpstreamTimeout } from './forward.ts'
import { createUndiciUpstream, type UndiciUpstream } from './undici-upstream.ts'

const PIECE = 16 * 1024
/** 8 MiB: far more than the HTTP/2 windows and socket buffers between server and edge hold. */
const PIECES = 512

let server: http2.Http2Server
let origin: string
let upstream: UndiciUpstream
/** The server's view of the current response: bytes written, and since when its writes wait for 'drain'. */
let sent = { bytes: 0, blockedSinceMs: undefined as number | undefined, ended: false }
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
    let i = 0
    const more = () => {
      sent.blockedSinceMs = undefined
      while (i < PIECES) {
        sent.bytes += PIECE
        if (!res.write(Buffer.alloc(PIECE, i++ % 251))) {
          sent.blockedSinceMs = Date.now()
          res.once('drain', more)
          return
        }
      }
      sent.ended = true
      res.end()
    }
    more()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  upstream = createUndiciUpstream({ connectTimeoutMs: 2000 })
})

afterAll(async () => {
  await upstream?.close()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

function expectPattern(bytes: Uint8Array): void {
  expect(bytes.byteLength).toBe(PIECE * PIECES)
  for (let p = 0; p < PIECES; p++) expect(bytes[p * PIECE + PIECE - 1]).toBe(p % 251)
}

describe('the undici upstream answer', () => {
  for (const read of ['arrayBuffer', 'body'] as const) {
    it(`holds back a body nobody reads yet, then delivers all of it (${read})`, async () => {
      sent = { bytes: 0, blockedSinceMs: undefined, ended: false }
      const res = await upstream.fetch(`${origin}/x`, { method: 'POST', body: '{}' })
      // Nothing reads yet: the server stalls (its writes have waited for 'drain' a while) with
      // most of the body unsent, rather than the edge taking it all into memory.
      for (;;) {
        if (sent.ended || (sent.blockedSinceMs !== undefined && Date.now() - sent.blockedSinceMs > 300)) break
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(sent.ended).toBe(false)
      expect(sent.bytes).toBeLessThan((PIECE * PIECES) / 2)
      let bytes: Uint8Array
      if (read === 'arrayBuffer') bytes = new Uint8Array(await res.arrayBuffer())
      else {
        const chunks: Uint8Array[] = []
        for await (const c of res.body!) chunks.push(c)
        bytes = new Uint8Array(Buffer.concat(chunks))
      }
      expectPattern(bytes)
    })
  }
})

describe('the undici upstream headers timeout', () => {
  const waitFor = async (what: () => boolean) => {
    while (!what()) await new Promise((resolve) => setTimeout(resolve, 10))
  }

  it('rejects with UpstreamTimeout when no headers came in time, resets that stream, and keeps the connection serving', async () => {
    const before = { ...hung }
    const startedAt = Date.now()
    const err = await upstream.fetch(`${origin}/hang`, { method: 'POST', body: '{}', headersTimeoutMs: 200 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(UpstreamTimeout)
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(195)
    expect(hung.received).toBe(before.received + 1)
    await waitFor(() => hung.closed === before.closed + 1)
    sent = { bytes: 0, blockedSinceMs: undefined, ended: false }
    const res = await upstream.fetch(`${origin}/x`, { method: 'POST', body: '{}', headersTimeoutMs: 2000 })
    expectPattern(new Uint8Array(await res.arrayBuffer()))
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
