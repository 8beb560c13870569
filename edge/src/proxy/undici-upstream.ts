/**
 * The Node entry's upstream: undici with one Agent per GPU node origin, each holding ONE
 * connection (`connections: 1`) that multiplexes every concurrent request as an HTTP/2 stream —
 * negotiated by ALPN for https nodes, h2c with prior knowledge for http ones (the node accepts
 * both on one port, DESIGN.md §7).
 *
 * Two things in undici 7.30's source decide whether that multiplexing happens at all:
 * - a Client's `pipelining` defaults to 1 and also caps concurrent HTTP/2 streams;
 * - an HTTP/2 Client holds back a request while another runs if it is non-idempotent (every
 *   POST, unless the dispatch says `idempotent: true`) or has a stream body (fetch() always
 *   turns the body into one). So this uses the dispatcher API with the body as bytes and
 *   `idempotent: true` (undici uses the flag only for this scheduling decision, never to retry).
 * Token streams are long and gappy: no body or headers timeout here (forward.ts owns the time
 * until headers; the client's disconnect owns the rest) and a long keep-alive.
 */
import type { Readable } from 'node:stream'
import { Agent } from 'undici'
import type { UpstreamFetch } from './forward.ts'

/** Concurrent HTTP/2 streams per node connection. */
export const MAX_STREAMS_PER_NODE = 128
const KEEP_ALIVE_MS = 10 * 60_000

export interface UndiciUpstream {
  fetch: UpstreamFetch
  /** Origins with an open Agent (one per GPU node). */
  origins(): string[]
  close(): Promise<void>
}

export interface UndiciUpstreamOptions {
  connectTimeoutMs: number
  /** Extra TLS options for https nodes (e.g. a private CA in tests). */
  tls?: { ca?: string | Buffer; rejectUnauthorized?: boolean }
}

export function createUndiciUpstream(opts: UndiciUpstreamOptions): UndiciUpstream {
  const agents = new Map<string, Agent>()
  const agentFor = (origin: string): Agent => {
    let agent = agents.get(origin)
    if (!agent) {
      agent = new Agent({
        allowH2: true,
        useH2c: origin.startsWith('http:'),
        connections: 1,
        pipelining: MAX_STREAMS_PER_NODE,
        maxConcurrentStreams: MAX_STREAMS_PER_NODE,
        connectTimeout: opts.connectTimeoutMs,
        headersTimeout: 0,
        bodyTimeout: 0,
        keepAliveTimeout: KEEP_ALIVE_MS,
        keepAliveMaxTimeout: KEEP_ALIVE_MS,
        ...(opts.tls ? { connect: opts.tls } : {}),
        // `useH2c` is read by undici's Client but missing from its option types.
      } as Agent.Options)
      agents.set(origin, agent)
    }
    return agent
  }

  return {
    async fetch(url, init) {
      const target = new URL(url)
      const res = await agentFor(target.origin).request({
        origin: target.origin,
        path: target.pathname + target.search,
        method: (init.method ?? 'GET') as 'POST',
        headers: Object.fromEntries(new Headers(init.headers)),
        body: bytesOf(init.body),
        idempotent: true,
        signal: init.signal ?? undefined,
      })
      const headers = new Headers()
      for (const [name, value] of Object.entries(res.headers)) {
        if (Array.isArray(value)) for (const v of value) headers.append(name, v)
        else if (value !== undefined) headers.set(name, value)
      }
      const nullBody = res.statusCode === 204 || res.statusCode === 304
      if (nullBody) res.body.resume()
      // Cancelling the web stream destroys the undici body, which resets the HTTP/2 stream.
      const body = nullBody ? null : webBody(res.body)
      return new Response(body, { status: res.statusCode, headers })
    },
    origins: () => [...agents.keys()],
    async close() {
      await Promise.all([...agents.values()].map((a) => a.close()))
      agents.clear()
    },
  }
}

/**
 * The undici body as a web stream, chunks as they come: the same contract as Readable.toWeb
 * (backpressure, cancel destroys the source, a source that fails or closes early errors the
 * stream), without its per-chunk queuing-strategy machinery, which cost more CPU per response
 * than the rest of the pass-through.
 */
export function webBody(source: Readable): ReadableStream<Uint8Array> {
  let cancelled = () => {}
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        // Settled once: after a cancel or an error the controller must not be touched again.
        let open = true
        const settle = (end: () => void) => {
          if (!open) return
          open = false
          end()
        }
        source.on('data', (chunk: Buffer) => {
          if (!open) return
          controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))
          if ((controller.desiredSize ?? 0) <= 0) source.pause()
        })
        source.once('end', () => settle(() => controller.close()))
        source.once('error', (e) => settle(() => controller.error(e)))
        source.once('close', () => settle(() => controller.error(new Error('upstream body closed before its end'))))
        cancelled = () => (open = false)
      },
      pull() {
        source.resume()
      },
      cancel() {
        cancelled()
        source.destroy()
      },
    },
    // Chunks the stream holds before the source is paused.
    { highWaterMark: 16 },
  )
}

function bytesOf(body: RequestInit['body']): Uint8Array | string | undefined {
  if (body === undefined || body === null) return undefined
  if (typeof body === 'string' || body instanceof Uint8Array) return body
  throw new TypeError('the undici upstream sends byte or string bodies only')
}
