/**
 * A node server on 127.0.0.1 with test doubles behind it, and small clients for HTTP/1.1
 * (fetch) and HTTP/2 (node:http2), for the server tests.
 */
import http2 from 'node:http2'
import { signRequest } from '../../../shared/src/signature.ts'
import { createNodeMetrics, type NodeMetrics } from '../../src/metrics/node-metrics.ts'
import { createRequestHandler } from '../../src/server/app.ts'
import { createSignatureCheck } from '../../src/server/edge-signature.ts'
import { createNodeServer, type NodeServer } from '../../src/server/http.ts'
import type { Logger } from '../../src/server/json-log.ts'
import { silentLogger } from './silent-logger.ts'
import { createNodeState, type NodeState } from '../../src/server/node-state.ts'
import { byteEncoder, ScriptedEngine } from './scripted-engine.ts'

export const TEST_SECRET = 'test-edge-secret'

export interface TestNode {
  url: string
  port: number
  engine: ScriptedEngine
  state: NodeState
  metrics: NodeMetrics
  server: NodeServer
  close(): Promise<void>
}

export interface TestNodeOptions {
  secret?: string
  allowUnsigned?: boolean
  maxBodyBytes?: number
  keepAliveMs?: number
  contextLength?: number
  tls?: { cert: string; key: string }
  log?: Logger
}

export async function startTestNode(opts: TestNodeOptions = {}): Promise<TestNode> {
  const engine = new ScriptedEngine()
  const state = createNodeState()
  state.ready = true
  const encoder = byteEncoder(opts.contextLength ?? 256)
  const metrics = createNodeMetrics({ region: 'test-region', model: encoder.modelId, stats: () => engine.stats() })
  const handler = createRequestHandler({
    encoder,
    engine,
    state,
    metrics,
    log: opts.log ?? silentLogger,
    checkSignature: createSignatureCheck({ secret: opts.secret, allowUnsigned: opts.allowUnsigned ?? opts.secret === undefined }),
    maxBodyBytes: opts.maxBodyBytes ?? 1024 * 1024,
    keepAliveMs: opts.keepAliveMs ?? 5000,
  })
  const server = createNodeServer({ handler, ...(opts.tls ? { tls: opts.tls } : {}), maxBodyBytes: opts.maxBodyBytes ?? 1024 * 1024 })
  const addr = await server.listen(0, '127.0.0.1')
  const url = `${server.protocol}://127.0.0.1:${addr.port}`
  return { url, port: addr.port, engine, state, metrics, server, close: () => server.close(500) }
}

/** Headers the edge would add: a request id and a valid signature over the exact body bytes. */
export async function edgeHeaders(path: string, body: string | Uint8Array, requestId = `req-${Math.random().toString(36).slice(2)}`, secret = TEST_SECRET): Promise<Record<string, string>> {
  const bytes = typeof body === 'string' ? new TextEncoder().encode(body) : body
  const signature = await signRequest({ secret, method: 'POST', path, requestId, body: bytes, nowMs: Date.now() })
  return { 'x-request-id': requestId, 'x-zl-signature': signature, 'content-type': 'application/json' }
}

export interface H2Response {
  status: number
  headers: http2.IncomingHttpHeaders
  body: string
}

/** One request over an HTTP/2 session (h2c prior knowledge for http:, ALPN h2 for https:). */
export function h2Request(session: http2.ClientHttp2Session, method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<H2Response> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': method, ':path': path, ...headers }, { endStream: body === undefined })
    let status = 0
    let responseHeaders: http2.IncomingHttpHeaders = {}
    const chunks: Buffer[] = []
    stream.on('response', (h) => {
      responseHeaders = h
      status = Number(h[':status'])
    })
    stream.on('data', (c: Buffer) => chunks.push(c))
    stream.on('end', () => resolve({ status, headers: responseHeaders, body: Buffer.concat(chunks).toString('utf8') }))
    stream.on('error', reject)
    if (body !== undefined) stream.end(body)
  })
}

export function h2Connect(url: string, options: http2.SecureClientSessionOptions = {}): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, options)
    session.once('connect', () => resolve(session))
    session.once('error', reject)
  })
}

/** Reads a streamed fetch body until `done(textSoFar)` holds; returns the text read. */
export async function readUntil(body: ReadableStream<Uint8Array>, done: (text: string) => boolean): Promise<{ text: string; reader: ReadableStreamDefaultReader<Uint8Array> }> {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let text = ''
  while (!done(text)) {
    const { value, done: end } = await reader.read()
    if (end) break
    text += decoder.decode(value, { stream: true })
  }
  return { text, reader }
}

/** The rest of a stream that readUntil() started, to its end. */
export async function readRest(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder()
  let rest = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return rest + decoder.decode()
    rest += decoder.decode(value, { stream: true })
  }
}

/** A response body as loosely typed JSON: tests assert on its shape. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function json(res: Response): Promise<any> {
  return res.json()
}
