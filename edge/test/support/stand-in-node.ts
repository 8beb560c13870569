/**
 * A stand-in GPU node for edge tests (Node side): answers the three dialect routes with a short,
 * well-formed stream or JSON body (the shared encoders), verifies the edge's signature, and
 * records what it received. What it does is scripted per request id (the edge forwards
 * x-request-id), so test files running at once never disturb each other:
 *   ok | 503 | 400 | hang (never answers) | late (answers as ok, LATE_MS late) | break (2 frames, or half a JSON answer, then the socket
 *   dies) | slow (a frame every 20 ms for ~10 s: for abort tests) | flood (FLOOD_FRAMES at once)
 *   | firehose (FIREHOSE_FRAMES big frames as fast as the edge takes them, honouring backpressure;
 *   without `stream`, a JSON answer of FIREHOSE_JSON_TEXT '~'s written in FIREHOSE_FRAME_PAYLOAD pieces).
 * Protocols: HTTP/1.1 (what workerd speaks to origins) or h2c with prior knowledge (the Node edge).
 */
import { textChoice } from '../../../shared/src/generation.ts'
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { dialectForPath } from '../../../shared/src/dialects/index.ts'
import { renderError } from '../../../shared/src/error-body.ts'
import { ApiError } from '../../../shared/src/api-error.ts'
import { SSE_HEADERS } from '../../../shared/src/sse.ts'
import { resumeSignedExtra } from '../../../shared/src/resume-wire.ts'
import { verifySignature } from '../../../shared/src/signature.ts'

/** Frames a `flood` stream sends at once. */
export const FLOOD_FRAMES = 5000

/** A `firehose` stream: this many frames, each carrying this many '~'s (about 50 MB in all). */
export const FIREHOSE_FRAMES = 3072
export const FIREHOSE_FRAME_PAYLOAD = 16 * 1024
/** A non-streamed `firehose` answer's text length: many more pieces than the edge holds unread. */
export const FIREHOSE_JSON_TEXT = 64 * FIREHOSE_FRAME_PAYLOAD

export type Mode = 'ok' | '503' | '400' | 'hang' | 'late' | 'break' | 'slow' | 'flood' | 'firehose'

/** How long a `late` node keeps its answer back. */
export const LATE_MS = 400

export interface Received {
  node: string
  path: string
  requestId: string
  headers: Record<string, string>
  body: string
  /** verifySignature's verdict on x-zl-signature. */
  signature: 'ok' | 'missing' | 'malformed' | 'expired' | 'mismatch'
  /** The edge closed the connection/stream before the response ended. */
  clientClosed: boolean
  completed: boolean
  /** firehose: bytes handed to write() so far, and since when write() has been waiting for 'drain'. */
  bytesWritten?: number
  blockedSinceMs?: number
}

export interface StandInOptions {
  id: string
  secret: string
  protocol: 'http1' | 'h2c'
  /** Scripted modes by request id (shared by every stand-in of a test run). */
  script: Map<string, Record<string, Mode>>
  log: Received[]
  /** Called whenever a record changes (for waiters). */
  onChange: () => void
}

export interface StandIn {
  id: string
  url: string
  port: number
  /** h2c only: how many HTTP/2 sessions (connections) were opened. */
  sessions(): number
  close(): Promise<void>
}

type Req = http.IncomingMessage | http2.Http2ServerRequest
type Res = http.ServerResponse | http2.Http2ServerResponse
/** The one write signature both response classes share. */
const write = (res: Res, chunk: string) => (res as http.ServerResponse).write(chunk)

export async function startStandIn(opts: StandInOptions): Promise<StandIn> {
  let sessions = 0
  const handler = (req: Req, res: Res) => void handle(req, res, opts)
  const server = opts.protocol === 'h2c' ? http2.createServer(handler) : http.createServer({ keepAliveTimeout: 60_000, requestTimeout: 0 }, handler)
  if (opts.protocol === 'h2c') server.on('session', () => sessions++)
  const sockets = new Set<import('node:net').Socket>()
  server.on('connection', (s: import('node:net').Socket) => {
    sockets.add(s)
    s.once('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    id: opts.id,
    port,
    url: `http://127.0.0.1:${port}`,
    sessions: () => sessions,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  }
}

async function handle(req: Req, res: Res, opts: StandInOptions): Promise<void> {
  const chunks: Buffer[] = []
  for await (const c of req) chunks.push(c as Buffer)
  const body = Buffer.concat(chunks)
  const path = new URL(req.url ?? '/', 'http://x').pathname
  const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !k.startsWith(':')).map(([k, v]) => [k, String(v)]))
  const requestId = headers['x-request-id'] ?? ''
  const verdict = await verifySignature({ secret: opts.secret, header: headers['x-zl-signature'], method: req.method ?? 'POST', path, requestId, body: new Uint8Array(body), nowMs: Date.now(), extra: resumeSignedExtra((n) => headers[n]) })
  const record: Received = { node: opts.id, path, requestId, headers, body: body.toString('utf8'), signature: verdict.ok ? 'ok' : verdict.reason, clientClosed: false, completed: false }
  opts.log.push(record)
  opts.onChange()
  // On an HTTP/2 RST_STREAM the compat response emits 'finish' and reports writableFinished;
  // only writableEnded (we called end()) tells a finished response from an abandoned one.
  res.on('close', () => {
    if (res.writableEnded) record.completed = true
    else record.clientClosed = true
    opts.onChange()
  })

  const codec = dialectForPath(path)
  const mode = opts.script.get(requestId)?.[opts.id] ?? 'ok'
  if (!codec) return json(res, 404, { error: 'no route' })
  if (mode === 'hang') return
  if (mode === 'late') await new Promise((resolve) => setTimeout(resolve, LATE_MS))
  if (mode === '503' || mode === '400') {
    const err = mode === '503' ? new ApiError('overloaded', 'stand-in is full', { retryAfterMs: 250 }) : new ApiError('invalid_request', 'stand-in refuses')
    const r = renderError(codec.errors, err)
    return json(res, r.status, r.body, r.headers)
  }
  const parsed = JSON.parse(body.toString('utf8')) as { model: string; stream?: boolean }
  const meta = { requestId, model: parsed.model, created: 1_700_000_000 }
  if (!parsed.stream) {
    const answer = codec.jsonBody(meta, [textChoice(`hello from ${opts.id}`, 'stop')], { promptTokens: 3, completionTokens: 3 })
    if (mode === 'break') {
      // Headers and half the document, then the socket dies.
      const text = JSON.stringify(answer)
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), 'x-request-id': requestId })
      write(res, text.slice(0, text.length >> 1))
      setTimeout(() => destroy(req, res), 30)
      return
    }
    if (mode === 'firehose') {
      const text = JSON.stringify(codec.jsonBody(meta, [textChoice('~'.repeat(FIREHOSE_JSON_TEXT), 'stop')], { promptTokens: 3, completionTokens: 3 }))
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), 'x-request-id': requestId })
      for (let at = 0; at < text.length; at += FIREHOSE_FRAME_PAYLOAD) write(res, text.slice(at, at + FIREHOSE_FRAME_PAYLOAD))
      res.end()
      return
    }
    return json(res, 200, answer, { 'x-request-id': requestId })
  }
  const enc = codec.streamEncoder({ ...meta, promptTokens: 3 })
  res.writeHead(200, { ...SSE_HEADERS, 'x-request-id': requestId })
  write(res, enc.start() + enc.text('hello'))
  if (mode === 'break') {
    // Let the frames reach the edge, then die mid-stream.
    setTimeout(() => destroy(req, res), 30)
    return
  }
  if (mode === 'flood') {
    // Thousands of frames at once (about 1 MB): far more than one read or one HTTP/2 window.
    for (let n = 0; n < FLOOD_FRAMES; n++) write(res, enc.text(` tick${n}`))
    res.end(enc.finish('stop', { promptTokens: 3, completionTokens: FLOOD_FRAMES }))
    return
  }
  if (mode === 'firehose') {
    // How far this gets while the client reads nothing is what the edge buffers in between.
    const frame = enc.text(' ' + '~'.repeat(FIREHOSE_FRAME_PAYLOAD))
    record.bytesWritten = 0
    let sent = 0
    const pump = () => {
      record.blockedSinceMs = undefined
      while (sent < FIREHOSE_FRAMES) {
        sent++
        record.bytesWritten! += Buffer.byteLength(frame)
        if (!write(res, frame)) {
          record.blockedSinceMs = Date.now()
          res.once('drain', pump)
          return
        }
      }
      res.end(enc.finish('stop', { promptTokens: 3, completionTokens: FIREHOSE_FRAMES }))
    }
    pump()
    return
  }
  if (mode === 'slow') {
    let n = 0
    const timer = setInterval(() => {
      if (res.destroyed || n++ > 500) {
        clearInterval(timer)
        if (!res.destroyed) res.end(enc.finish('stop', { promptTokens: 3, completionTokens: n }))
        return
      }
      write(res, enc.text(' tick'))
    }, 20)
    res.on('close', () => clearInterval(timer))
    return
  }
  res.end(enc.text(` from ${opts.id}`) + enc.finish('stop', { promptTokens: 3, completionTokens: 3 }))
}

function json(res: Res, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...headers, 'content-type': 'application/json' })
  res.end(JSON.stringify(body))
}

function destroy(req: Req, res: Res): void {
  if ('stream' in req && req.stream) req.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
  else (res as http.ServerResponse).socket?.destroy()
}
