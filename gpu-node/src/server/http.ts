/**
 * One listener for every protocol the node must speak (DESIGN.md §7):
 * - with TLS: h2 and HTTP/1.1 chosen by ALPN (`http2.createSecureServer({ allowHTTP1: true })`);
 * - without TLS: HTTP/1.1 (workerd's local fetch) and h2c with prior knowledge (the Node edge)
 *   on the same port, told apart by the connection's first bytes.
 * Both feed one compat-API handler. Streams are long and gappy, so no per-request timeouts.
 */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { isHttp2, type RequestHandler, type ServerRequest, type ServerResponse } from './http-types.ts'

/** What an HTTP/2 client with prior knowledge sends first (RFC 9113 §3.4). */
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1')
/** A generous idle keep-alive so an edge's pooled connection survives between requests. */
const KEEP_ALIVE_TIMEOUT_MS = 75_000
/**
 * Per-session memory Node's HTTP/2 allows before it refuses new streams, in MB (default 10).
 * One edge multiplexes every stream it routes here over one session: leave room for hundreds.
 */
const H2_MAX_SESSION_MEMORY_MB = 64
/**
 * HTTP/2 flow control. Node's server advertises the protocol's default windows (64 KiB per stream
 * and per connection), so an edge one region away could send only 64 KiB of a prompt per round
 * trip: measured through infra/local/wan-relay.ts at RTT 100 ms, a 200 kB body's first byte came
 * back after 564 ms against 111 ms for a small one (4.5 extra RTTs of WINDOW_UPDATEs). The node
 * reads every body whole anyway (bounded by MAX_BODY_BYTES), so its windows let the largest body
 * it accepts arrive in one flight, and the connection's let many of them arrive at once.
 */
export const H2_MIN_STREAM_WINDOW_BYTES = 1024 * 1024
export const H2_CONNECTION_WINDOW_BYTES = 32 * 1024 * 1024
const H2_MAX_WINDOW_BYTES = 2 ** 31 - 1

/** How long a fresh connection may take to send enough bytes to classify it. */
const SNIFF_TIMEOUT_MS = 10_000

export interface NodeServerOptions {
  handler: RequestHandler
  tls?: { certFile: string; keyFile: string } | { cert: string | Buffer; key: string | Buffer }
  /** The largest request body the routes accept: the HTTP/2 stream window covers it (default 1 MiB). */
  maxBodyBytes?: number
}

/** The windows this node advertises to an HTTP/2 client (the edge). */
export function h2Windows(maxBodyBytes = 0): { stream: number; connection: number } {
  // Headroom over the body for the frames around it; never below the protocol's own bounds.
  const stream = Math.min(H2_MAX_WINDOW_BYTES, Math.max(H2_MIN_STREAM_WINDOW_BYTES, maxBodyBytes + 64 * 1024))
  return { stream, connection: Math.min(H2_MAX_WINDOW_BYTES, Math.max(H2_CONNECTION_WINDOW_BYTES, 4 * stream)) }
}

export interface NodeServer {
  listen(port: number, host: string): Promise<AddressInfo>
  /** Stops accepting, lets in-flight responses end, then closes idle connections; resolves when closed. */
  close(forceAfterMs?: number): Promise<void>
  readonly protocol: 'https' | 'http'
}

export function createNodeServer(opts: NodeServerOptions): NodeServer {
  const windows = h2Windows(opts.maxBodyBytes)
  return opts.tls ? createTlsServer(opts.handler, opts.tls, windows) : createPlainServer(opts.handler, windows)
}

type Windows = ReturnType<typeof h2Windows>

function createTlsServer(handler: RequestHandler, tls: NonNullable<NodeServerOptions['tls']>, windows: Windows): NodeServer {
  const creds = 'certFile' in tls ? { cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) } : tls
  const server = http2.createSecureServer({ ...creds, allowHTTP1: true, maxSessionMemory: H2_MAX_SESSION_MEMORY_MB, settings: { initialWindowSize: windows.stream } }, handler)
  // Node's default 2-minute-ish idle timeouts would cut quiet streams; keep-alive handles idle sockets.
  server.setTimeout(0)
  const sessions = trackSessions(server, windows)
  const sockets = trackSockets(server, 'secureConnection')
  const h1 = new Http1Idleness()
  server.on('request', (req: ServerRequest, res: ServerResponse) => {
    if (!isHttp2(req)) h1.track(req.socket as net.Socket, res)
  })
  return {
    protocol: 'https',
    listen: (port, host) => listen(server, port, host),
    close: (forceAfterMs) => closeAll(server, sessions, sockets, forceAfterMs, () => h1.closeIdle()),
  }
}

function createPlainServer(handler: RequestHandler, windows: Windows): NodeServer {
  const h1 = http.createServer({ keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS, requestTimeout: 0, headersTimeout: 60_000 }, handler)
  const h2 = http2.createServer({ maxSessionMemory: H2_MAX_SESSION_MEMORY_MB, settings: { initialWindowSize: windows.stream } }, handler)
  h2.setTimeout(0)
  const sessions = trackSessions(h2, windows)
  const sockets = new Set<net.Socket>()
  const idleness = new Http1Idleness()
  h1.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => idleness.track(req.socket as net.Socket, res))
  /** Connections that have not sent a byte yet (clients open spares, e.g. fetch after an abort): idle by definition. */
  const unsniffed = new Set<net.Socket>()
  const listener = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket)
    unsniffed.add(socket)
    socket.once('close', () => {
      sockets.delete(socket)
      unsniffed.delete(socket)
    })
    sniff(socket, (isH2) => {
      unsniffed.delete(socket)
      if (!isH2) idleness.add(socket)
      ;(isH2 ? h2 : h1).emit('connection', socket)
    })
  })
  const closeIdle = () => {
    idleness.closeIdle()
    for (const socket of unsniffed) socket.destroy()
  }
  return {
    protocol: 'http',
    listen: (port, host) => listen(listener, port, host),
    close: (forceAfterMs) => closeAll(listener, sessions, sockets, forceAfterMs, closeIdle),
  }
}

/**
 * Reads until the bytes either diverge from the h2 preface or complete it, then puts them back
 * (`unshift`) and hands the socket over. Both http and http2 servers read bytes already
 * buffered on a socket they are given (http2: nodejs/node#35475).
 */
function sniff(socket: net.Socket, route: (isH2: boolean) => void): void {
  let seen = Buffer.alloc(0)
  const timer = setTimeout(() => socket.destroy(), SNIFF_TIMEOUT_MS)
  const done = (isH2: boolean) => {
    clearTimeout(timer)
    socket.removeListener('readable', onReadable)
    socket.removeListener('error', onError)
    socket.removeListener('end', onEnd)
    socket.unshift(seen)
    route(isH2)
  }
  const onReadable = () => {
    let chunk: Buffer | null
    while ((chunk = socket.read() as Buffer | null) !== null) {
      seen = Buffer.concat([seen, chunk])
      const n = Math.min(seen.length, H2_PREFACE.length)
      if (!seen.subarray(0, n).equals(H2_PREFACE.subarray(0, n))) return done(false)
      if (seen.length >= H2_PREFACE.length) return done(true)
    }
  }
  const onError = () => {
    clearTimeout(timer)
    socket.destroy()
  }
  const onEnd = () => {
    clearTimeout(timer)
    socket.destroy()
  }
  socket.on('readable', onReadable)
  socket.on('error', onError)
  socket.on('end', onEnd)
}

/**
 * In-flight requests per HTTP/1.1 socket, so a closing server can end keep-alive connections as
 * soon as they are idle. (Node's own closeIdleConnections only tracks servers that listen
 * themselves; ours are fed sockets by the sniffing listener or by the TLS server.)
 */
class Http1Idleness {
  private readonly inFlight = new Map<net.Socket, number>()

  add(socket: net.Socket): void {
    if (this.inFlight.has(socket)) return
    this.inFlight.set(socket, 0)
    socket.once('close', () => this.inFlight.delete(socket))
  }

  track(socket: net.Socket, res: ServerResponse): void {
    this.add(socket)
    this.inFlight.set(socket, (this.inFlight.get(socket) ?? 0) + 1)
    res.once('close', () => {
      const n = this.inFlight.get(socket)
      if (n !== undefined) this.inFlight.set(socket, n - 1)
    })
  }

  closeIdle(): void {
    for (const [socket, n] of this.inFlight) if (n === 0) socket.destroy()
  }
}

function listen(server: net.Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.removeListener('error', reject)
      resolve(server.address() as AddressInfo)
    })
  })
}

function trackSessions(server: http2.Http2Server | http2.Http2SecureServer, windows: Windows): Set<http2.ServerHttp2Session> {
  const sessions = new Set<http2.ServerHttp2Session>()
  server.on('session', (session: http2.ServerHttp2Session) => {
    sessions.add(session)
    // The connection window is not a SETTINGS value: it grows by a WINDOW_UPDATE sent now, with
    // the server's SETTINGS, so the client may use it from its first request on.
    session.setLocalWindowSize(windows.connection)
    session.once('close', () => sessions.delete(session))
    // A broken peer must not surface as an unhandled 'error' event.
    session.on('error', () => {})
  })
  return sessions
}

function trackSockets(server: net.Server, event: string): Set<net.Socket> {
  const sockets = new Set<net.Socket>()
  server.on(event, (socket: net.Socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  return sockets
}

/**
 * Graceful close: stop listening, GOAWAY every h2 session (in-flight streams finish), close idle
 * HTTP/1.1 sockets as they become idle, and destroy whatever is left after `forceAfterMs`.
 */
async function closeAll(
  server: net.Server,
  sessions: Set<http2.ServerHttp2Session>,
  sockets: Set<net.Socket>,
  forceAfterMs = 5000,
  closeIdle: () => void = () => {},
): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()))
  for (const s of sessions) s.close()
  closeIdle()
  const idlePoll = setInterval(closeIdle, 100)
  const force = setTimeout(() => {
    for (const s of sessions) s.destroy()
    for (const s of sockets) s.destroy()
  }, forceAfterMs)
  force.unref()
  try {
    await closed
  } finally {
    clearInterval(idlePoll)
    clearTimeout(force)
  }
}
