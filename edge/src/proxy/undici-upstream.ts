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
 * Token streams are long and gappy: no body timeout (the client's disconnect owns the body's time),
 * the time until headers is the caller's per request (`headersTimeoutMs`), and a long keep-alive.
 *
 * Connections are opened ahead of need (`warm`, called by the Node entry for every serving node
 * in the table): a node in another region is an RTT away, and a request that had to open the
 * connection itself would wait one more round trip for the TCP handshake (measured with
 * infra/local/wan-relay.ts: a fresh edge's first request to a node 70 ms away came back 74–79 ms
 * after a warm one). That is the first request after a failover, or after an idle connection was
 * closed, exactly when a region's traffic moves.
 */
import { Agent } from 'undici'
import { NULL_BODY_STATUSES, UpstreamTimeout, type UpstreamFetch, type UpstreamInit, type UpstreamResponse } from './forward.ts'
import type { ChunkSink, PushedBody } from './pass-through.ts'
import { concatBytes } from '../bytes.ts'

/** Concurrent HTTP/2 streams per node connection. */
export const MAX_STREAMS_PER_NODE = 128
const KEEP_ALIVE_MS = 10 * 60_000

export interface UndiciUpstream {
  fetch: UpstreamFetch
  /** Origins with an open Agent (one per GPU node). */
  origins(): string[]
  /** Origins whose connection is open now. */
  connected(): string[]
  /**
   * Opens a connection (with a GET /healthz) to each origin that has none and is not being opened;
   * failures are left to routing (a node that cannot be reached is marked down by the request that
   * tries it). Resolves when every attempt has settled.
   */
  warm(origins: readonly string[]): Promise<void>
  close(): Promise<void>
}

export interface UndiciUpstreamOptions {
  connectTimeoutMs: number
  /** Extra TLS options for https nodes (e.g. a private CA in tests). */
  tls?: { ca?: string | Buffer; rejectUnauthorized?: boolean }
}

export function createUndiciUpstream(opts: UndiciUpstreamOptions): UndiciUpstream {
  const agents = new Map<string, Agent>()
  const open = new Set<string>()
  const warming = new Map<string, Promise<void>>()
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
      agent.on('connect', () => open.add(origin))
      agent.on('disconnect', () => open.delete(origin))
      agent.on('connectionError', () => open.delete(origin))
      agents.set(origin, agent)
    }
    return agent
  }
  const warmOne = (origin: string): Promise<void> => {
    const agent = agentFor(origin)
    const attempt = agent
      .request({ origin, path: '/healthz', method: 'GET', signal: AbortSignal.timeout(opts.connectTimeoutMs * 2) })
      .then((res) => res.body.dump())
      .catch(() => {})
      .finally(() => warming.delete(origin))
    warming.set(origin, attempt)
    return attempt
  }

  return {
    fetch(url, init) {
      const target = new URL(url)
      return dispatchFetch(agentFor(target.origin), target, init)
    },
    origins: () => [...agents.keys()],
    connected: () => [...open],
    async warm(origins) {
      const attempts: Promise<void>[] = []
      for (const origin of new Set(origins)) {
        if (open.has(origin)) continue
        attempts.push(warming.get(origin) ?? warmOne(origin))
      }
      await Promise.all(attempts)
    },
    async close() {
      await Promise.all([...agents.values()].map((a) => a.close()))
      agents.clear()
    },
  }
}

/**
 * One request through undici's dispatcher API. The `request()` API would wrap it in an
 * AsyncResource and a Node Readable, then the Readable in a web stream; the handler here feeds
 * an UpstreamAnswer directly, with the same contract: backpressure (a full body pauses the HTTP/2
 * stream until the client reads), the client's signal or a cancelled body aborts the upstream
 * request (resetting the HTTP/2 stream), a failure after the headers errors the body.
 * The headers timeout is one timer that rejects with UpstreamTimeout and aborts the request:
 * forward.ts used to build an AbortController and a listener per attempt for it (in the profile,
 * `createAbortSignal` went from 1.8 % of the edge's busy samples to 1.1 %, the client's own).
 */
function dispatchFetch(agent: Agent, target: URL, init: UpstreamInit): Promise<UpstreamResponse> {
  return new Promise<UpstreamResponse>((resolve, reject) => {
    const signal = init.signal ?? undefined
    let abortUpstream: ((reason: Error) => void) | undefined
    /** Why the request was ended before undici handed over its abort (onConnect aborts with it). */
    let abortedWith: Error | undefined
    let answer: UpstreamAnswer | undefined
    let ended = false
    const abort = (reason: Error) => {
      if (abortUpstream) abortUpstream(reason)
      else abortedWith ??= reason
    }
    const onAbort = () => abort(reasonOf(signal))
    signal?.addEventListener('abort', onAbort, { once: true })
    const timer = init.headersTimeoutMs === undefined ? undefined : setTimeout(() => end(() => {
      const timeout = new UpstreamTimeout()
      abort(timeout)
      reject(timeout)
    }), init.headersTimeoutMs)
    const end = (finish: () => void) => {
      signal?.removeEventListener('abort', onAbort)
      clearTimeout(timer)
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
        onConnect(abortDispatch: (reason: Error) => void) {
          if (signal?.aborted) return abortDispatch(reasonOf(signal))
          if (abortedWith) return abortDispatch(abortedWith)
          abortUpstream = abortDispatch
        },
        onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void) {
          if (statusCode < 200) return true
          clearTimeout(timer)
          const headers = new Headers()
          for (let i = 0; i + 1 < rawHeaders.length; i += 2) headers.append(rawHeaders[i]!.toString('latin1'), rawHeaders[i + 1]!.toString('latin1'))
          answer = new UpstreamAnswer(statusCode, headers, resume, () => end(() => abortUpstream?.(new Error('response body cancelled'))))
          resolve(answer)
          return true
        },
        onData(chunk: Buffer) {
          if (ended || !answer) return true
          return answer.take(chunk)
        },
        onComplete() {
          end(() => answer?.complete())
        },
        onError(err: Error) {
          end(() => (answer ? answer.fail(err) : reject(err)))
        },
      },
    )
  })
}

/** Chunks a body holds before the upstream is paused, until someone reads it. */
const HELD_CHUNKS = 16

/**
 * A node's answer as forward.ts reads it. The body stays a list of chunks until one consumer
 * claims it: `arrayBuffer()` (a whole JSON answer) joins them; `pushTo()` (a token stream on the
 * Node entry) hands each chunk on as it comes; `body` builds a web stream. Whichever it is, a
 * consumer that is full pauses the HTTP/2 stream until it asks for more.
 */
class UpstreamAnswer implements UpstreamResponse {
  private held: Uint8Array[] = []
  private sink: ChunkSink | undefined
  private outcome: { done: true } | { error: unknown } | undefined
  private paused = false
  private made: ReadableStream<Uint8Array> | undefined
  /** A status whose response has no body (fetch's `body` is null). */
  private readonly empty: boolean

  constructor(
    readonly status: number,
    readonly headers: Headers,
    private readonly resume: () => void,
    private readonly cancel: () => void,
  ) {
    this.empty = NULL_BODY_STATUSES.has(status)
  }

  get body(): ReadableStream<Uint8Array> | null {
    if (this.empty) return null
    if (this.made) return this.made
    this.made = new ReadableStream<Uint8Array>(
      {
        start: (controller) =>
          this.claim({
            chunk: (bytes) => {
              controller.enqueue(bytes)
              return (controller.desiredSize ?? 1) > 0
            },
            end: () => controller.close(),
            error: (err) => controller.error(err),
          }),
        pull: () => this.wake(),
        cancel: () => this.cancel(),
      },
      { highWaterMark: HELD_CHUNKS },
    )
    return this.made
  }

  arrayBuffer(): Promise<ArrayBuffer> {
    return new Promise<ArrayBuffer>((resolve, reject) => {
      const parts: Uint8Array[] = []
      this.claim({ chunk: (bytes) => parts.push(bytes) > 0, end: () => resolve(concatBytes(parts).buffer), error: reject })
    })
  }

  pushTo(sink: ChunkSink): PushedBody {
    this.claim(sink)
    return { resume: () => this.wake(), cancel: () => this.cancel() }
  }

  /** A chunk from the node; false pauses the HTTP/2 stream. */
  take(chunk: Buffer): boolean {
    const bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    if (this.sink) return this.flowing(this.sink.chunk(bytes))
    this.held.push(bytes)
    return this.flowing(this.held.length < HELD_CHUNKS)
  }

  complete(): void {
    this.outcome = { done: true }
    this.sink?.end()
  }

  fail(err: Error): void {
    this.outcome = { error: err }
    this.sink?.error(err)
  }

  /** The one consumer: what is held goes to it first, then the ending if the node already ended. */
  private claim(sink: ChunkSink): void {
    if (this.sink) throw new TypeError('the upstream body is already used')
    this.sink = sink
    if (this.empty) return sink.end()
    let more = true
    for (const bytes of this.held) more = sink.chunk(bytes)
    this.held = []
    if (this.outcome && 'error' in this.outcome) sink.error(this.outcome.error)
    else if (this.outcome) sink.end()
    else if (more) this.wake()
  }

  private flowing(more: boolean): boolean {
    this.paused = !more
    return more
  }

  private wake(): void {
    if (!this.paused) return
    this.paused = false
    this.resume()
  }
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
