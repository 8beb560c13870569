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
    fetch(url, init) {
      const target = new URL(url)
      return dispatchFetch(agentFor(target.origin), target, init)
    },
    origins: () => [...agents.keys()],
    async close() {
      await Promise.all([...agents.values()].map((a) => a.close()))
      agents.clear()
    },
  }
}

/**
 * One request through undici's dispatcher API, its answer as a web Response. The `request()` API
 * would wrap it in an AsyncResource and a Node Readable, then the Readable in a web stream; the
 * handler here feeds the web stream directly, with the same contract: backpressure (a full
 * stream pauses the HTTP/2 stream until the client reads), the client's signal or a cancelled
 * body aborts the upstream request (resetting the HTTP/2 stream), a failure after the headers
 * errors the body.
 */
function dispatchFetch(agent: Agent, target: URL, init: RequestInit): Promise<Response> {
  return new Promise<Response>((resolve, reject) => {
    const signal = init.signal ?? undefined
    let abortUpstream: ((reason: Error) => void) | undefined
    let resumeUpstream: (() => void) | undefined
    let body: ReadableStreamDefaultController<Uint8Array> | undefined
    let answered = false
    let ended = false
    const onAbort = () => abortUpstream?.(reasonOf(signal))
    signal?.addEventListener('abort', onAbort, { once: true })
    const end = (finish: () => void) => {
      signal?.removeEventListener('abort', onAbort)
      if (ended) return
      ended = true
      finish()
    }
    agent.dispatch(
      {
        origin: target.origin,
        path: target.pathname + target.search,
        method: (init.method ?? 'GET') as 'POST',
        headers: plainHeaders(init.headers),
        body: bytesOf(init.body),
        idempotent: true,
      },
      {
        onConnect(abort: (reason: Error) => void) {
          if (signal?.aborted) return abort(reasonOf(signal))
          abortUpstream = abort
        },
        onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void) {
          if (statusCode < 200) return true
          resumeUpstream = resume
          const headers = new Headers()
          for (let i = 0; i + 1 < rawHeaders.length; i += 2) headers.append(rawHeaders[i]!.toString('latin1'), rawHeaders[i + 1]!.toString('latin1'))
          const nullBody = statusCode === 204 || statusCode === 304
          const stream = nullBody
            ? null
            : new ReadableStream<Uint8Array>(
                {
                  start: (controller) => void (body = controller),
                  pull: () => resumeUpstream?.(),
                  cancel: () => end(() => abortUpstream?.(new Error('response body cancelled'))),
                },
                // Chunks the stream holds before the upstream is paused.
                { highWaterMark: 16 },
              )
          answered = true
          resolve(new Response(stream, { status: statusCode, headers }))
          return true
        },
        onData(chunk: Buffer) {
          if (ended || !body) return true
          body.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))
          return (body.desiredSize ?? 1) > 0
        },
        onComplete() {
          end(() => body?.close())
        },
        onError(err: Error) {
          end(() => (answered ? body?.error(err) : reject(err)))
        },
      },
    )
  })
}

function reasonOf(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason
  return reason instanceof Error ? reason : new Error('request aborted')
}

function bytesOf(body: RequestInit['body']): Uint8Array | string | undefined {
  if (body === undefined || body === null) return undefined
  if (typeof body === 'string' || body instanceof Uint8Array) return body
  throw new TypeError('the undici upstream sends byte or string bodies only')
}

/** forward.ts passes a plain record of valid lower-case names: taken as is; anything else normalised. */
function plainHeaders(headers: RequestInit['headers']): Record<string, string> {
  if (headers && !(headers instanceof Headers) && !Array.isArray(headers)) return headers as Record<string, string>
  return Object.fromEntries(new Headers(headers))
}
