/**
 * Step 5–6 of DESIGN.md §3: sign the ORIGINAL body bytes, send them to the same path on the best
 * node, fail over before the first response byte, and hand the node's body to the client as the
 * response body — no parsing, no re-encoding (proxy/pass-through.ts).
 *
 * Failover: a connect error or 503/529 (overloaded) moves on to the next ranked node, up to
 * MAX_ATTEMPTS in all; the failed node is marked down in this isolate — for the full mark-down
 * when it could not be reached, but only briefly and as busy when it was full or slow to answer
 * (`markFailed`). A stream's node that sends no headers within UPSTREAM_CONNECT_TIMEOUT_MS (a
 * node answers a stream's headers as soon as it admits it) is hedged: the next node is asked
 * beside it and the first answer is taken (hedged-attempts.ts). A JSON answer's headers come
 * with the whole completion: REQUEST_TIMEOUT_MS each, one node at a time. Any other status is the
 * node's answer.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import type { Digest } from '../../../shared/src/digest.ts'
import { RESUME_HEADERS, resumeHeader, resumeSignedExtra } from '../../../shared/src/resume-wire.ts'
import { signRequest } from '../../../shared/src/signature.ts'
import { andThen } from '../../../shared/src/maybe-promise.ts'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import { forwardedResponse, type ResponseBody } from './forwarded-response.ts'
import { streamEndsOf } from './frame-scanner.ts'
import { HedgedAttempts } from './hedged-attempts.ts'
import { passThrough, type BodyOutcome, type PipedBody, type Relay, type UpstreamBody } from './pass-through.ts'
import { resumableBody, type ResumeOutcome } from './resumable-body.ts'
import { targetUrl } from './target-url.ts'

/**
 * What forward reads of a node's answer. fetch's Response has it; the Node entry's upstreams
 * hand over a lighter object that builds a web stream only if one is asked for, and can push a
 * streamed body straight into the Node server's response (pass-through.ts).
 */
export interface UpstreamResponse extends UpstreamBody {
  readonly status: number
  readonly headers: UpstreamHeaders
  arrayBuffer(): Promise<ArrayBuffer>
}

/**
 * What forward reads of a node's response headers (lower-case names): fetch's Headers has it;
 * the Node entry's upstreams wrap node:http2's header object or undici's raw list instead of
 * building a Headers, which validates every entry and sorts them to iterate — only the client's
 * headers need that (`responseHeaders`).
 */
export interface UpstreamHeaders {
  get(name: string): string | null
  forEach(fn: (value: string, name: string) => void): void
}

/**
 * fetch's shape (the Workers global through `withHeadersTimeout`, or the Node entry's own upstream:
 * HTTP/1.1 to its region's nodes, one HTTP/2 connection to each other node, node-upstream.ts),
 * plus the time the node has to send its response headers: past it the promise rejects with
 * UpstreamTimeout and the request is aborted.
 * `init.signal` is the client's, for the whole exchange, headers and body.
 */
export type UpstreamFetch = (url: string, init: UpstreamInit) => Promise<UpstreamResponse>
export interface UpstreamInit extends Omit<RequestInit, 'signal'> {
  signal?: ClientSignal
  headersTimeoutMs?: number
  /** The node's region: the Node entry reaches its own region's nodes over HTTP/1.1 (node-upstream.ts). */
  nodeRegion?: string
}

/**
 * What the edge reads of the client's signal: an AbortSignal has it (the Workers entry passes the
 * request's own); the Node entry passes a lighter one read off its response (entries/client-signal.ts).
 */
export interface ClientSignal {
  readonly aborted: boolean
  readonly reason: unknown
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

/** No response headers within `headersTimeoutMs`: the node is connected but too slow to answer. */
export class UpstreamTimeout extends Error {
  override readonly name = 'UpstreamTimeout'
  constructor() {
    super('upstream timeout')
  }
}

/**
 * An UpstreamFetch over a plain fetch (the Workers entry): the headers timeout as an abort of
 * its own beside the caller's signal. The Node entry's upstreams time the request themselves,
 * without a controller per request (h1-upstream.ts, h2-upstream.ts).
 */
export function withHeadersTimeout(fetchLike: (url: string, init: RequestInit) => Promise<UpstreamResponse>): UpstreamFetch {
  // `nodeRegion` is the Node entry's routing hint, not a fetch option: it stays here.
  return async (url, { headersTimeoutMs, nodeRegion: _region, signal: client, ...init }) => {
    if (headersTimeoutMs === undefined && !client) return fetchLike(url, init)
    const controller = new AbortController()
    const onClientAbort = () => controller.abort(client?.reason)
    if (client?.aborted) onClientAbort()
    else client?.addEventListener('abort', onClientAbort, { once: true })
    let timedOut = false
    const timer = headersTimeoutMs === undefined ? undefined : setTimeout(() => {
      timedOut = true
      controller.abort(new UpstreamTimeout())
    }, headersTimeoutMs)
    try {
      const res = await fetchLike(url, { ...init, signal: controller.signal })
      // The client's abort still ends the body: the listener stays until the body is done or gone.
      return res
    } catch (e) {
      client?.removeEventListener('abort', onClientAbort)
      throw timedOut ? new UpstreamTimeout() : e
    } finally {
      clearTimeout(timer)
    }
  }
}

export const MAX_ATTEMPTS = 3
/** Statuses that mean "this node cannot take it now": retried on another node. */
const OVERLOADED_STATUSES = new Set([503, 529])
/** Statuses whose response has no body (a Response with one would throw). */
export const NULL_BODY_STATUSES = new Set([204, 205, 304])
/**
 * Response headers not passed on: those that describe the node's connection, not the content,
 * and the ones the edge sets itself (a node's own value never reaches the client).
 */
const NOT_PASSED_ON = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-connection', 'content-length', 'content-encoding', WIRE_HEADERS.region, 'server-timing', WIRE_HEADERS.failover])

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
  signal?: ClientSignal
  /** Epoch ms the edge received the request. */
  startedAtMs: number
  /** A stream's sampling seed, fixed here so a continuation is exact (used only where the body has none). */
  seed?: number
  /** A continuation: the tokens the client already has, and whether the finish flush too (x-zl-resume). */
  resume?: { tokens: readonly number[]; flushed: boolean }
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
  /** Continuations per stream after its node failed (default MAX_RESUMES); 0: off. */
  maxResumes?: number
  /** No bytes from a streaming node for this long counts as its death (default STREAM_STALL_MS). */
  stallMs?: number
  /** Counts resume attempts by outcome (a metric). */
  onResume?: (outcome: ResumeOutcome) => void
  /**
   * Where a continuation may go, best first, none of `exclude`: the caller re-ranks the current
   * node table by its own rule (generate.ts: affinity placement), since a stream can outlive the
   * table it was routed on. Default: the request's ranking less `exclude`.
   */
  resumeNodes?: (exclude: ReadonlySet<string>) => Promise<readonly RankedNode[]>
  /** A continuation is now served by `node` (load and affinity bookkeeping). */
  onResumedOn?: (node: RankedNode) => void
  /** EdgeDeps.relayedStreams: the server writes every forwarded event stream through its relay. */
  relayedStreams?: boolean
}

/** DESIGN.md §4 Resume: at most two continuations per stream, then the shaped error event. */
export const MAX_RESUMES = 2
/**
 * A node that sends nothing for this long mid-stream is treated as dead. Above the node's 5 s
 * keep-alive interval (sent while a stream waits for its first token) with room for a loaded
 * step; a token stream otherwise never pauses this long.
 */
export const STREAM_STALL_MS = 15_000

export interface ForwardResult {
  /** The answer's status: the node's (for an all-overloaded answer, the last one's). */
  status: number
  /**
   * The Response, made once, after `addEdgeHeaders` has written the edge's own headers (request
   * id, limits, affinity) into the node's record: one plain record, never a Headers object
   * edited after the fact (forwarded-response.ts), nor a second record copied into it.
   */
  respond(addEdgeHeaders?: (headers: Record<string, string>) => void): Response
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

type Attempt =
  | { ok: true; res: UpstreamResponse }
  /** `slow`: connected, but no headers within the timeout; `overloaded`: it answered 503/529. */
  | { ok: false; slow?: boolean; overloaded?: { status: number; headers: UpstreamHeaders; body: Uint8Array } }

export async function forward(nodes: readonly RankedNode[], req: ForwardRequest, deps: ForwardDeps): Promise<ForwardResult> {
  const upstreamStartMs = deps.now()
  let failed = 0
  let lastOverload: Extract<Attempt, { ok: false }>['overloaded']
  let lastOverloadNode: RankedNode | undefined
  let brokeMidBody = false
  let slow = false
  // A stream's headers come when its node admits it: a node silent past the connect timeout is
  // hedged (hedged-attempts.ts), not given up. A JSON answer's come with the whole completion.
  const attempts = new HedgedAttempts<RankedNode, Attempt>({
    nodes: nodes.slice(0, MAX_ATTEMPTS),
    send: (node, headersTimeoutMs) => send(node, req, deps, headersTimeoutMs),
    ...(req.stream ? { hedgeAfterMs: deps.connectTimeoutMs } : {}),
    timeoutMs: deps.requestTimeoutMs,
    now: deps.now,
    settledLate: ({ node, attempt }) => {
      if (attempt.ok) attempt.res.body?.cancel().catch(() => {})
      else markFailed(node, attempt, deps)
    },
  })
  for (let settled = await attempts.settle(); settled; settled = await attempts.settle()) {
    const { node, attempt } = settled
    if (attempt.ok) {
      // Nodes asked before this one whose answer it overtook count as failovers, like failed ones.
      failed += attempts.overtaken()
      attempts.abandon()
      const headersAtMs = deps.now()
      const headers = responseHeaders(attempt.res.headers, node, failed, req.startedAtMs, upstreamStartMs, headersAtMs)
      const sse = (attempt.res.headers.get('content-type') ?? '').startsWith('text/event-stream')
      // Decided without touching `body`: the Node upstream builds a web stream only when asked.
      if (NULL_BODY_STATUSES.has(attempt.res.status)) {
        return answered(node, failed, Promise.resolve({ kind: 'complete' }), attempt.res.status, headers, null)
      }
      if (!req.stream && !sse) {
        const answer = await wholeAnswer(attempt, headers, node, failed, req, deps)
        // A node that died while sending its JSON answer: the request is simply asked again elsewhere.
        if (answer) return answer
        // Not marked down: like a broken stream, it says less about the node than a refused connection.
        failed++
        brokeMidBody = true
        attempts.moveOn()
        continue
      }
      if (req.stream && sse && attempt.res.status === 200 && (deps.maxResumes ?? MAX_RESUMES) > 0) return resumingStream(nodes, node, attempt, headers, failed, req, deps)
      const piped = passThrough(attempt.res, { codec: req.codec, sse, now: deps.now })
      return answered(node, failed, piped.finished, attempt.res.status, headers, clientBody(piped, sse, deps), sse, piped.relay)
    }
    failed++
    markFailed(node, attempt, deps)
    slow ||= attempt.slow === true
    if (attempt.overloaded) {
      lastOverload = attempt.overloaded
      lastOverloadNode = node
    }
    attempts.moveOn()
  }
  if (lastOverload && lastOverloadNode) {
    // Every node that answered was full: the last one's own dialect-shaped 503/529 (with
    // retry-after-ms) is the answer, and the attempts before it count as failovers.
    const headers = responseHeaders(lastOverload.headers, lastOverloadNode, failed - 1, req.startedAtMs, upstreamStartMs, deps.now())
    return answered(lastOverloadNode, failed - 1, Promise.resolve({ kind: 'complete' }), lastOverload.status, headers, lastOverload.body)
  }
  if (brokeMidBody) throw new ApiError('upstream_unavailable', 'The GPU node failed while sending this response; please retry.', { retryAfterMs: 1000 })
  if (slow) throw new ApiError('overloaded', 'The GPU nodes serving this model are too busy to answer in time; please retry.', { retryAfterMs: deps.connectTimeoutMs })
  throw new ApiError('upstream_unavailable', 'No GPU node could be reached for this request; please retry.', { retryAfterMs: 1000 })
}

/**
 * A node whose attempt failed is skipped for a while in this isolate. A full node is healthy:
 * skip it only as long as it asked (retry-after-ms), not for the full mark-down of a node that
 * failed, or a burst would shut it out after it drained. A node that sent no headers in time is,
 * as measured under a 3× overload of the local stack, most often a node too busy to answer: it
 * is skipped as busy for as long as one request may spend finding every node slow (MAX_ATTEMPTS
 * timeouts), so a burst pays that once (a dead process refuses the connection and is marked down
 * in full; a dead machine's heartbeat stops, and the node table drops it). Marked down in full,
 * every node of the overloaded stack was soon down, and each request got a 502 instead of an
 * honest 503. A node that answered late, after a hedge, is not marked: it was not too busy.
 */
function markFailed(node: RankedNode, attempt: Extract<Attempt, { ok: false }>, deps: ForwardDeps): void {
  deps.markDown(node.id, attempt.overloaded ? retryHintMs(attempt.overloaded.headers) : attempt.slow ? MAX_ATTEMPTS * deps.connectTimeoutMs : undefined)
}

/**
 * A stream that can outlive its node: the node's body wrapped in a resumable body, which on a
 * failure continues it on the next ranked node that is neither down nor already failed, handed
 * the delivered tokens. Each continuation tries up to MAX_ATTEMPTS nodes, each bounded by the
 * connect timeout; what is left of the pipe (relay, error event, client cancel) is unchanged.
 */
function resumingStream(nodes: readonly RankedNode[], node: RankedNode, first: Extract<Attempt, { ok: true }>, headers: Record<string, string>, failed: number, req: ForwardRequest, deps: ForwardDeps): ForwardResult {
  const dead = new Set<string>()
  let serving = node
  const body = resumableBody(first.res, {
    ends: streamEndsOf(req.codec),
    maxResumes: deps.maxResumes ?? MAX_RESUMES,
    stallMs: deps.stallMs ?? STREAM_STALL_MS,
    ...(deps.onResume ? { onResume: deps.onResume } : {}),
    reopen: async (delivered, flushed) => {
      // Excluded for this request only: a stream that broke says less about its node than a
      // refused connection (which marks it down, as before the first byte).
      dead.add(serving.id)
      const ranked = deps.resumeNodes ? await deps.resumeNodes(dead) : nodes
      const next = ranked.filter((n) => !dead.has(n.id)).slice(0, MAX_ATTEMPTS)
      for (const candidate of next) {
        const attempt = await send(candidate, { ...req, resume: { tokens: delivered, flushed } }, deps, deps.connectTimeoutMs)
        if (attempt.ok && attempt.res.status === 200 && (attempt.res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
          serving = candidate
          deps.onResumedOn?.(candidate)
          return attempt.res
        }
        if (attempt.ok) attempt.res.body?.cancel().catch(() => {})
        dead.add(candidate.id)
        deps.markDown(candidate.id)
      }
      return undefined
    },
  })
  const piped = passThrough(body, { codec: req.codec, sse: true, now: deps.now })
  const finished = piped.finished
    .then((o): BodyOutcome => (body.resumes > 0 ? { ...o, resumes: body.resumes } : o))
  return answered(node, failed, finished, 200, headers, clientBody(piped, true, deps), true, piped.relay)
}

/**
 * The Response's body: none for an event stream the server will relay (`relayedStreams`), so the
 * pass-through never makes its web stream; the web stream otherwise.
 */
function clientBody(piped: PipedBody, sse: boolean, deps: ForwardDeps): ResponseBody {
  return sse && piped.relay && deps.relayedStreams ? null : piped.readable
}

/**
 * A non-streaming answer is one JSON document the client can only use whole, so the edge takes
 * it whole (bytes untouched) and answers with headers and body in one write — rather than headers
 * first and the body as a stream, a second socket write that cost more CPU than the rest of the
 * response. A node that breaks off mid-body is answered undefined: forward asks the next node
 * (the client never saw a byte), and only when every node failed is it a clean 502.
 */
async function wholeAnswer(attempt: Extract<Attempt, { ok: true }>, headers: Record<string, string>, node: RankedNode, failed: number, req: ForwardRequest, deps: ForwardDeps): Promise<ForwardResult | undefined> {
  let bytes: ArrayBuffer
  try {
    bytes = await attempt.res.arrayBuffer()
  } catch {
    if (req.signal?.aborted) throw new ClientGone()
    return undefined
  }
  const finished = Promise.resolve<BodyOutcome>({ kind: 'complete', firstByteAtMs: deps.now() })
  // A Uint8Array (not the ArrayBuffer): @hono/node-server's Response keeps it as is and writes
  // it with the headers in one call, without building a web stream around it.
  return answered(node, failed, finished, attempt.res.status, headers, new Uint8Array(bytes))
}

/** A ForwardResult whose Response is made when the caller has its own headers to add. */
function answered(node: RankedNode, failedAttempts: number, finished: Promise<BodyOutcome>, status: number, headers: Record<string, string>, body: ResponseBody, sse = false, relay?: Relay): ForwardResult {
  return {
    status,
    node,
    failedAttempts,
    finished,
    respond: (addEdgeHeaders) => {
      addEdgeHeaders?.(headers)
      return forwardedResponse(body, { status, headers, sse, relay })
    },
  }
}

async function send(node: RankedNode, req: ForwardRequest, deps: ForwardDeps, headersTimeoutMs: number): Promise<Attempt> {
  if (req.signal?.aborted) throw new ClientGone()
  const target = targetUrl(node.url, req.path)
  const signed = wireHeaders(req, target.pathname, deps)
  const headers = signed instanceof Promise ? await signed : signed
  // The timeout ends only this attempt (the upstream times it); the client's signal ends it too.
  let res: UpstreamResponse
  try {
    res = await deps.upstream(target.href, { method: 'POST', headers, body: req.body, signal: req.signal, redirect: 'manual', headersTimeoutMs, nodeRegion: node.region })
  } catch (e) {
    if (req.signal?.aborted) throw new ClientGone()
    return e instanceof UpstreamTimeout ? { ok: false, slow: true } : { ok: false }
  }
  if (!OVERLOADED_STATUSES.has(res.status)) return { ok: true, res }
  // Small JSON error body: read it now, so it can be the answer if every node is full.
  let body = new Uint8Array(0)
  try {
    body = new Uint8Array(await res.arrayBuffer())
  } catch {
    // A broken error body still means "overloaded".
  }
  return { ok: false, overloaded: { status: res.status, headers: res.headers, body } }
}

/**
 * A plain record (fetch takes one as is; a Headers object validates every entry, which showed in
 * profiles); no promise when the digest signs synchronously (the Node entry's).
 */
function wireHeaders(req: ForwardRequest, signedPath: string, deps: ForwardDeps): Record<string, string> | Promise<Record<string, string>> {
  const nowMs = deps.now()
  const resume: Record<string, string> = {}
  if (req.stream && (deps.maxResumes ?? MAX_RESUMES) > 0) {
    // Every stream asks for id lines (the edge's delivery record) and carries its fixed seed;
    // with resume off (MAX_RESUMES=0) the stream is the plain pipe, without id lines.
    resume[RESUME_HEADERS.resumable] = '1'
    if (req.seed !== undefined) resume[RESUME_HEADERS.seed] = String(req.seed)
    if (req.resume) resume[RESUME_HEADERS.resume] = resumeHeader(req.resume.tokens, req.resume.flushed)
  }
  const extra = resumeSignedExtra((name) => resume[name])
  const signature = signRequest({ secret: deps.secret, method: 'POST', path: signedPath, requestId: req.requestId, body: req.body, nowMs, extra }, deps.digest)
  // The literal first and the resume fields assigned after: a literal that starts with a spread
  // was built property by property (see observe-request.ts).
  const headers = (sig: string): Record<string, string> => Object.assign({
    'content-type': 'application/json',
    accept: req.stream ? 'text/event-stream' : 'application/json',
    [WIRE_HEADERS.requestId]: req.requestId,
    [WIRE_HEADERS.traceparent]: req.traceparent,
    [WIRE_HEADERS.tenant]: req.tenant,
    [WIRE_HEADERS.keyId]: req.keyId,
    [WIRE_HEADERS.deadlineMs]: String(Math.floor(nowMs + deps.requestTimeoutMs)),
    [WIRE_HEADERS.priority]: String(req.priority),
    [WIRE_HEADERS.edge]: req.edge,
    [WIRE_HEADERS.signature]: sig,
  }, resume)
  return andThen(signature, headers)
}

/**
 * The node's headers that are passed on, and the edge's own about the answer, as one plain record
 * (forwarded-response.ts says why): one pass that skips what is not passed on. A name the node
 * sent twice is joined as a Headers object would join it.
 */
function responseHeaders(upstream: UpstreamHeaders, node: RankedNode, failed: number, startedAtMs: number, upstreamStartMs: number, headersAtMs: number): Record<string, string> {
  const headers: Record<string, string> = {}
  upstream.forEach((value, name) => {
    if (NOT_PASSED_ON.has(name)) return
    const had = headers[name]
    headers[name] = had === undefined ? value : `${had}, ${value}`
  })
  headers[WIRE_HEADERS.region] = node.region
  headers['server-timing'] = `edge;dur=${Math.max(0, upstreamStartMs - startedAtMs)}, upstream;dur=${Math.max(0, headersAtMs - upstreamStartMs)}`
  if (failed > 0) headers[WIRE_HEADERS.failover] = String(failed)
  return headers
}

/** The node's own retry hint for an overload answer, in ms (1 s when it gave none). */
function retryHintMs(headers: UpstreamHeaders): number {
  const ms = Number(headers.get('retry-after-ms'))
  if (Number.isFinite(ms) && ms > 0) return ms
  const s = Number(headers.get('retry-after'))
  return Number.isFinite(s) && s > 0 ? s * 1000 : 1000
}
