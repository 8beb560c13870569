/**
 * The body half of the edge upstreams' contract, shared by h1-upstream.test.ts and
 * h2-upstream.test.ts: a server side that writes a large patterned body and records when its
 * writes back up, and the checks that an answer nobody reads holds the server back and then
 * comes whole, read as bytes or as a web stream.
 */
import { expect } from 'vitest'
import type { UpstreamResponse } from '../../edge/src/proxy/upstream-fetch.ts'

const PIECE = 16 * 1024
/**
 * 96 MiB: far more than the HTTP/2 windows and the socket buffers between server and edge can
 * hold, so "less than half was sent" means held back. Loopback buffers autotune: this machine
 * allows a 32 MiB receive buffer (net.ipv4.tcp_rmem) and a 4 MiB send buffer, and with 8 MiB the
 * check failed under load, when the kernel had taken most of the body.
 */
const PIECES = 6144

/** The server's view of the current big response: bytes written, and since when its writes wait for 'drain'. */
export interface SentLog {
  bytes: number
  blockedSinceMs: number | undefined
  ended: boolean
}

export const freshSentLog = (): SentLog => ({ bytes: 0, blockedSinceMs: undefined, ended: false })

/** Writes the patterned body into a node:http or node:http2 response, honouring 'drain', logging into `sent`. */
export function writePatternedBody(res: { write(chunk: Buffer): boolean; once(event: 'drain', fn: () => void): unknown; end(): unknown }, sent: SentLog): void {
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
}

export function expectPatternedBody(bytes: Uint8Array): void {
  expect(bytes.byteLength).toBe(PIECE * PIECES)
  for (let p = 0; p < PIECES; p++) expect(bytes[p * PIECE + PIECE - 1]).toBe(p % 251)
}

/**
 * Nothing reads `res` yet: the server stalls (its writes have waited for 'drain' a while) with most
 * of the body unsent, rather than the edge taking it all into memory; then, read, it comes whole.
 */
export async function expectHeldBackThenWhole(res: UpstreamResponse, sent: SentLog, read: 'arrayBuffer' | 'body'): Promise<void> {
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
  expectPatternedBody(bytes)
}

export async function waitFor(what: () => boolean): Promise<void> {
  while (!what()) await new Promise((resolve) => setTimeout(resolve, 10))
}
