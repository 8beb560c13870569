/**
 * Step 5–6 of DESIGN.md §3: sign the ORIGINAL body bytes, send them to the same path on the best
 * node, fail over before the first response byte, and hand the node's body to the client as the
 * response body — no parsing, no re-encoding (proxy/pass-through.ts).
 *
 * Failover: a connect error, no response headers within the timeout, or 503/529 (overloaded)
 * moves on to the next ranked node, up to MAX_ATTEMPTS in all; the failed node is marked down in
 * this isolate. The timeout until headers is UPSTREAM_CONNECT_TIMEOUT_MS for streams (a node
 * answers a stream's headers as soon as it admits it) and REQUEST_TIMEOUT_MS otherwise (a JSON
 * answer's headers come with the whole completion). Any other status is the node's answer.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import type { Digest } from '../../../shared/src/digest.ts'
import { signRequest } from '../../../shared/src/signature.ts'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import { offerRelay, passThrough, type BodyOutcome, type UpstreamBody } from './pass-through.ts'
import { targetUrl } from './target-url.ts'

/**
 * What forward reads of a node's answer. fetch's Response has it; the Node entry's undici upstream
 * hands over a lighter object that builds a web stream only if one is asked for, and can push a
 * streamed body straight into the Node server's response (pass-through.ts).
 */
export interface UpstreamResponse extends UpstreamBody {
  readonly status: number
  readonly headers: Headers
  arrayBuffer(): Promise<ArrayBuffer>
}

/** fetch's shape: the Workers global, or undici with one HTTP/2 connection per node (Node entry). */
export type UpstreamFetch = (url: string, init: RequestInit) => Promise<UpstreamResponse>

export const MAX_ATTEMPTS = 3
/** Statuses that mean "this node cannot take it now": retried on another node. */
const OVERLOADED_STATUSES = new Set([503, 529])
/** Statuses whose response has no body (a Response with one would throw). */
export const NULL_BODY_STATUSES = new Set([204, 205, 304])
/** Response headers that describe the node's connection, not the content. */
const HOP_BY_HOP = ['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-connection', 'content-length', 'content-encoding']

export interface ForwardRequest {
  /** URL pathname on the node, e.g. `/v1/chat/completions`. */
  path: string
  body: Uint8Array
  stream: boolean
  /** The client's dialect: shapes the error event of a stream that breaks. */
  codec: DialectCodec
  requestId: string
  traceparent: string
  tenant: string
  keyId: string
  priority: number
  /** x-zl-edge: colo or EDGE_REGION. */
  edge: string
  /** The client's: aborts the upstream request when the client leaves, before or after headers. */
  signal?: AbortSignal
  /** Epoch ms the edge received the request. */
  startedAtMs: number
}

export interface ForwardDeps {
  upstream: UpstreamFetch
  secret: string
  /** Signs the request (default: Web Crypto; the Node entry passes node:crypto's). */
  digest?: Digest
  connectTimeoutMs: number
  requestTimeoutMs: number
  /** Skip a node in this isolate for `forMs` (default: the registry's mark-down time). */
  markDown: (nodeId: string, forMs?: number) => void
  now: () => number
}

export interface ForwardResult {
  response: Response
  /** The node whose response this is (for an all-overloaded answer: the last one tried). */
  node: RankedNode
  failedAttempts: number
  /** Settles when the body ends, breaks or the client leaves. */
  finished: Promise<BodyOutcome>
}

/** The client left before the node answered: nothing to send. */
export class ClientGone extends Error {
  override readonly name = 'ClientGone'
}

type Attempt = { ok: true; res: UpstreamResponse; detach: () => void } | { ok: false; overloaded?: { status: number; headers: Headers; body: Uint8Array } }

export async function forward(nodes: readonly RankedNode[], req: ForwardRequest, deps: ForwardDeps): Promise<ForwardResult> {
  const tried = nodes.slice(0, MAX_ATTEMPTS)
  const upstreamStartMs = deps.now()
  let failed = 0
  let lastOverload: Extract<Attempt, { ok: false }>['overloaded']
  let lastOverloadNode: RankedNode | undefined
  for (const node of tried) {
    const attempt = await send(node, req, deps)
    if (attempt.ok) {
      const headersAtMs = deps.now()
      const headers = responseHeaders(attempt.res.headers, node, failed, req.startedAtMs, upstreamStartMs, headersAtMs)
      const sse = (attempt.res.headers.get('content-type') ?? '').startsWith('text/event-stream')
      // Decided without touching `body`: the Node upstream builds a web stream only when asked.
      if (NULL_BODY_STATUSES.has(attempt.res.status)) {
        attempt.detach()
        return { response: new Response(null, { status: attempt.res.status, headers }), node, failedAttempts: failed, finished: Promise.resolve({ kind: 'complete' }) }
      }
      if (!req.stream && !sse) return await wholeAnswer(attempt, headers, node, failed, req, deps)
      const piped = passThrough(attempt.res, { codec: req.codec, sse, now: deps.now })
      const finished = piped.finished.finally(attempt.detach)
      const response = new Response(piped.readable, { status: attempt.res.status, headers })
      if (piped.relay) offerRelay(response, piped.relay)
      return { response, node, failedAttempts: failed, finished }
    }
    failed++
    // A full node is healthy: skip it only as long as it asked (retry-after-ms), not for the
    // full mark-down of a node that failed, or a burst would shut it out after it drained.
    deps.markDown(node.id, attempt.overloaded ? retryHintMs(attempt.overloaded.headers) : undefined)
    if (attempt.overloaded) {
      lastOverload = attempt.overloaded
      lastOverloadNode = node
    }
  }
  if (lastOverload && lastOverloadNode) {
    // Every node that answered was full: the last one's own dialect-shaped 503/529 (with
    // retry-after-ms) is the answer, and the attempts before it count as failovers.
    const headers = responseHeaders(lastOverload.headers, lastOverloadNode, failed - 1, req.startedAtMs, upstreamStartMs, deps.now())
    return { response: new Response(lastOverload.body, { status: lastOverload.status, headers }), node: lastOverloadNode, failedAttempts: failed - 1, finished: Promise.resolve({ kind: 'complete' }) }
  }
  throw new ApiError('upstream_unavailable', 'No GPU node could be reached for this request; please retry.', { retryAfterMs: 1000 })
}

/**
 * A non-streaming answer is one JSON document the client can only use whole, so the edge takes
 * it whole (bytes untouched) and answers with headers and body in one write — rather than headers
 * first and the body as a stream, a second socket write that cost more CPU than the rest of the
 * response. A node that breaks off mid-body becomes a clean 502 instead of a truncated body.
 */
async function wholeAnswer(attempt: Extract<Attempt, { ok: true }>, headers: Headers, node: RankedNode, failed: number, req: ForwardRequest, deps: ForwardDeps): Promise<ForwardResult> {
  let bytes: ArrayBuffer
  try {
    bytes = await attempt.res.arrayBuffer()
  } catch (e) {
    if (req.signal?.aborted) throw new ClientGone()
    throw new ApiError('upstream_unavailable', 'The GPU node failed while sending this response; please retry.', { retryAfterMs: 1000, cause: e })
  } finally {
    attempt.detach()
  }
  const finished = Promise.resolve<BodyOutcome>({ kind: 'complete', firstByteAtMs: deps.now() })
  // A Uint8Array (not the ArrayBuffer): @hono/node-server's Response keeps it as is and writes
  // it with the headers in one call, without building a web stream around it.
  return { response: new Response(new Uint8Array(bytes), { status: attempt.res.status, headers }), node, failedAttempts: failed, finished }
}

async function send(node: RankedNode, req: ForwardRequest, deps: ForwardDeps): Promise<Attempt> {
  if (req.signal?.aborted) throw new ClientGone()
  const target = targetUrl(node.url, req.path)
  const headers = await wireHeaders(req, target.pathname, deps)
  // One controller per attempt: the timeout ends only this attempt; the client's signal ends it too.
  const controller = new AbortController()
  const onClientAbort = () => controller.abort(new ClientGone())
  req.signal?.addEventListener('abort', onClientAbort, { once: true })
  const detach = () => req.signal?.removeEventListener('abort', onClientAbort)
  const timeoutMs = req.stream ? deps.connectTimeoutMs : deps.requestTimeoutMs
  const timer = setTimeout(() => controller.abort(new Error('upstream timeout')), timeoutMs)
  let res: UpstreamResponse
  try {
    res = await deps.upstream(target.href, { method: 'POST', headers, body: req.body, signal: controller.signal, redirect: 'manual' })
  } catch {
    detach()
    if (req.signal?.aborted) throw new ClientGone()
    return { ok: false }
  } finally {
    clearTimeout(timer)
  }
  if (!OVERLOADED_STATUSES.has(res.status)) return { ok: true, res, detach }
  // Small JSON error body: read it now, so it can be the answer if every node is full.
  let body = new Uint8Array(0)
  try {
    body = new Uint8Array(await res.arrayBuffer())
  } catch {
    // A broken error body still means "overloaded".
  }
  detach()
  return { ok: false, overloaded: { status: res.status, headers: res.headers, body } }
}

/** A plain record (fetch takes one as is; a Headers object validates every entry, which showed in profiles). */
async function wireHeaders(req: ForwardRequest, signedPath: string, deps: ForwardDeps): Promise<Record<string, string>> {
  const nowMs = deps.now()
  const signature = await signRequest({ secret: deps.secret, method: 'POST', path: signedPath, requestId: req.requestId, body: req.body, nowMs }, deps.digest)
  return {
    'content-type': 'application/json',
    accept: req.stream ? 'text/event-stream' : 'application/json',
    [WIRE_HEADERS.requestId]: req.requestId,
    [WIRE_HEADERS.traceparent]: req.traceparent,
    [WIRE_HEADERS.tenant]: req.tenant,
    [WIRE_HEADERS.keyId]: req.keyId,
    [WIRE_HEADERS.deadlineMs]: String(Math.floor(nowMs + deps.requestTimeoutMs)),
    [WIRE_HEADERS.priority]: String(req.priority),
    [WIRE_HEADERS.edge]: req.edge,
    [WIRE_HEADERS.signature]: signature,
  }
}

function responseHeaders(upstream: Headers, node: RankedNode, failed: number, startedAtMs: number, upstreamStartMs: number, headersAtMs: number): Headers {
  const headers = new Headers(upstream)
  for (const name of HOP_BY_HOP) headers.delete(name)
  headers.set(WIRE_HEADERS.region, node.region)
  headers.set('server-timing', `edge;dur=${Math.max(0, upstreamStartMs - startedAtMs)}, upstream;dur=${Math.max(0, headersAtMs - upstreamStartMs)}`)
  if (failed > 0) headers.set(WIRE_HEADERS.failover, String(failed))
  else headers.delete(WIRE_HEADERS.failover)
  return headers
}

/** The node's own retry hint for an overload answer, in ms (1 s when it gave none). */
function retryHintMs(headers: Headers): number {
  const ms = Number(headers.get('retry-after-ms'))
  if (Number.isFinite(ms) && ms > 0) return ms
  const s = Number(headers.get('retry-after'))
  return Number.isFinite(s) && s > 0 ? s * 1000 : 1000
}
