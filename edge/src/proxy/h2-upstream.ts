/**
 * The Node entry's upstream: node:http2 with ONE session per GPU node origin, multiplexing every
 * concurrent request as an HTTP/2 stream — h2c with prior knowledge for http nodes, TLS with ALPN
 * h2 for https ones (the node accepts both on one port, DESIGN.md §7).
 *
 * Why node:http2 directly and not undici (which drives the same node:http2 underneath): undici's
 * request objects, queue and handler layers come on top. Counted under callgrind per 1 kB request
 * and its answer (bench/rig/upstream-cost.ts): ~262 k instructions through this module, 244–286 k
 * through node:http2 bare, 270–430 k through undici's HTTP/2 Agent (docs/PERFORMANCE.md, *The
 * edge's upstream*).
 *
 * The settings are undici's, which the round-1 measurements were made with: a 256 KiB stream
 * window and a 512 KiB connection window for the node's answers (a body nobody reads stalls the
 * node after that much, rather than piling up in the edge), no push, Nagle off on the socket,
 * TCP keep-alive. Token streams are long and gappy: there is no body timeout (the client's
 * disconnect owns the body's time), and the time until headers is the caller's per request
 * (`headersTimeoutMs`). An idle session stays open: the Node entry keeps one warm to every
 * serving node anyway.
 *
 * Connections are opened ahead of need (`warm`, called by the Node entry for every serving node
 * in the table): a node in another region is an RTT away, and a request that had to open the
 * connection itself would wait one more round trip for the TCP handshake (measured with
 * infra/local/wan-relay.ts: a fresh edge's first request to a node 70 ms away came back 74–79 ms
 * after a warm one). That is the first request after a failover, or after an idle connection was
 * closed, exactly when a region's traffic moves.
 *
 * A node that sends GOAWAY (it is draining) keeps serving the streams it has: node:http2 closes the
 * session to new ones, and the next request (or the warm-up), finding it closed, opens a new one.
 * node:http2 ends a stream's readable side ('end') even when the stream was reset or its
 * connection died, so the outcome is read at 'close', from the stream's RST code.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2'
import net from 'node:net'
import tls from 'node:tls'
import { UpstreamTimeout, type UpstreamHeaders, type UpstreamInit, type UpstreamResponse } from './upstream-fetch.ts'
import { bytesOf, healthzWarmer, plainHeaders, reasonOf, splitHref, type EdgeUpstream, type UpstreamTls } from './upstream-common.ts'
import { UpstreamAnswer } from './upstream-answer.ts'

/** Concurrent HTTP/2 streams per node connection (more wait in node:http2 for a free one). */
export const MAX_STREAMS_PER_NODE = 128
const STREAM_WINDOW_BYTES = 256 * 1024
const CONNECTION_WINDOW_BYTES = 512 * 1024
const TCP_KEEP_ALIVE_MS = 60_000
/**
 * Streams per session before a fresh one takes the new requests: a client's stream ids are the
 * odd numbers below 2^31, and node:http2 fails the request that finds none left.
 */
export const STREAMS_PER_SESSION = 2 ** 30 - 1
const { NGHTTP2_CANCEL, NGHTTP2_NO_ERROR } = http2.constants

export interface H2UpstreamOptions {
  connectTimeoutMs: number
  tls?: UpstreamTls
  /** Default STREAMS_PER_SESSION (tests lower it). */
  streamsPerSession?: number
}

interface Connection {
  session: ClientHttp2Session
  streams: number
}

/** Takes new streams: not closed (GOAWAY, retired, close()) and not destroyed. */
const usable = (session: ClientHttp2Session) => !session.closed && !session.destroyed
/** Connected now (node:http2 clears `connecting` before 'connect') and taking new streams. */
const open = (conn: Connection | undefined) => conn !== undefined && !conn.session.connecting && usable(conn.session)

export function createH2Upstream(opts: H2UpstreamOptions): EdgeUpstream {
  const streamsPerSession = opts.streamsPerSession ?? STREAMS_PER_SESSION
  const connections = new Map<string, Connection>()
  const forget = (origin: string, conn: Connection) => {
    if (connections.get(origin) === conn) connections.delete(origin)
  }
  /** The origin's session for one more stream. */
  const sessionFor = (origin: string): ClientHttp2Session => {
    const known = connections.get(origin)
    if (known && usable(known.session)) {
      if (known.streams++ < streamsPerSession) return known.session
      // This session's stream ids are spent: its open streams finish, this request opens the next one.
      forget(origin, known)
      known.session.close()
    }
    const session = http2.connect(origin, {
      createConnection: (authority) => socketTo(authority, opts.tls),
      peerMaxConcurrentStreams: MAX_STREAMS_PER_NODE,
      settings: { enablePush: false, initialWindowSize: STREAM_WINDOW_BYTES },
    })
    const conn: Connection = { session, streams: 1 }
    connections.set(origin, conn)
    // Until 'connect' (TCP, TLS, and the preface sent) at most the connect timeout; the streams
    // waiting on it then fail with the session, and forward tries the next node.
    const timer = setTimeout(() => session.destroy(new Error('upstream connect timeout')), opts.connectTimeoutMs)
    session.once('connect', () => {
      clearTimeout(timer)
      session.setLocalWindowSize(CONNECTION_WINDOW_BYTES)
    })
    // Each stream reports its own failure; this keeps a session error from being an uncaught one.
    session.on('error', () => {})
    session.once('close', () => {
      clearTimeout(timer)
      forget(origin, conn)
    })
    return session
  }

  return {
    fetch(url, init) {
      const [origin, path] = splitHref(url)
      return h2Fetch(sessionFor(origin), path, init)
    },
    origins: () => [...connections.keys()],
    connected: () => [...connections].filter(([, c]) => open(c)).map(([origin]) => origin),
    // A session closed to new streams (GOAWAY, retired) but still carrying old ones is not open: it needs a successor.
    warm: healthzWarmer(
      (origin) => open(connections.get(origin)),
      (origin) => h2Fetch(sessionFor(origin), '/healthz', { method: 'GET', headersTimeoutMs: opts.connectTimeoutMs * 2 }),
    ),
    async close() {
      const closing = [...connections.values()].map(({ session }) => new Promise<void>((resolve) => session.close(() => resolve())))
      connections.clear()
      await Promise.all(closing)
    },
  }
}

/** The socket under a session: Nagle off (a request is a HEADERS and a DATA frame, written apart), TCP keep-alive. */
function socketTo(authority: URL, tlsOpts: UpstreamTls | undefined): net.Socket {
  const host = authority.hostname.replace(/^\[(.*)\]$/, '$1')
  const secure = authority.protocol === 'https:'
  const port = Number(authority.port) || (secure ? 443 : 80)
  const socket = secure
    ? tls.connect({ host, port, ALPNProtocols: ['h2'], ...(net.isIP(host) ? {} : { servername: host }), ...tlsOpts })
    : net.connect({ host, port })
  socket.setNoDelay(true)
  socket.setKeepAlive(true, TCP_KEEP_ALIVE_MS)
  return socket
}

/**
 * One request on a session, with the contract forward.ts expects: backpressure (a full body
 * pauses the HTTP/2 stream until the client reads), the client's signal or a cancelled body
 * resets the stream, a failure after the headers errors the body. The headers timeout is one
 * timer that rejects with UpstreamTimeout and resets the stream.
 */
function h2Fetch(session: ClientHttp2Session, path: string, init: UpstreamInit): Promise<UpstreamResponse> {
  return new Promise<UpstreamResponse>((resolve, reject) => {
    const signal = init.signal ?? undefined
    if (signal?.aborted) return reject(reasonOf(signal))
    const body = bytesOf(init.body)
    let stream: ClientHttp2Stream
    try {
      stream = session.request({ ...plainHeaders(init.headers), ':method': init.method ?? 'GET', ':path': path }, { endStream: body === undefined })
    } catch (e) {
      // The session closed under us (GOAWAY between the check and the call): like a refused connection.
      return reject(e)
    }
    let answer: UpstreamAnswer | undefined
    /** Why the edge ended the stream itself (client gone, body cancelled, timeout). */
    let endedWith: Error | undefined
    const cut = (reason: Error) => {
      endedWith ??= reason
      stream.close(NGHTTP2_CANCEL)
    }
    const onAbort = () => cut(reasonOf(signal))
    signal?.addEventListener('abort', onAbort, { once: true })
    const timer =
      init.headersTimeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            const timeout = new UpstreamTimeout()
            cut(timeout)
            reject(timeout)
          }, init.headersTimeoutMs)
    let failure: Error | undefined
    stream.on('error', (err: Error) => (failure ??= err))
    // `on`, not `once`, for the events that come once: no wrapper per listener.
    stream.on('response', (headers: IncomingHttpHeaders) => {
      clearTimeout(timer)
      answer = new UpstreamAnswer(Number(headers[':status']), new NodeHeaders(headers), () => stream.resume(), () => cut(new Error('response body cancelled')))
      resolve(answer)
    })
    stream.on('data', (chunk: Buffer) => {
      if (answer && !answer.take(chunk)) stream.pause()
    })
    stream.on('close', () => {
      signal?.removeEventListener('abort', onAbort)
      clearTimeout(timer)
      const broken = endedWith ?? failure ?? (stream.rstCode === NGHTTP2_NO_ERROR ? undefined : new Error(`upstream stream reset (code ${stream.rstCode})`))
      if (!answer) return reject(broken ?? new Error('upstream stream closed before its response'))
      if (broken) answer.fail(broken)
      else answer.complete()
    })
    if (body !== undefined) stream.end(body)
  })
}

/** node:http2's response header object as forward.ts reads it (names are lower case in HTTP/2). */
class NodeHeaders implements UpstreamHeaders {
  constructor(private readonly raw: IncomingHttpHeaders) {}

  get(name: string): string | null {
    const value = this.raw[name]
    if (value === undefined) return null
    return typeof value === 'string' ? value : value.join(', ')
  }

  forEach(fn: (value: string, name: string) => void): void {
    for (const name in this.raw) {
      if (name.charCodeAt(0) === 58 /* ':' */) continue
      const value = this.raw[name]
      if (typeof value === 'string') fn(value, name)
      else if (value) for (const v of value) fn(v, name)
    }
  }
}
