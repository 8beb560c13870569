/**
 * One try at one node: sign the original bytes (shared/src/signature.ts), send them with the
 * edge's wire headers, and sort what came back into an answer or a failure — connect error, no
 * headers in time (`slow`), or a full node's 503/529 (`overloaded`, its small body kept in case it
 * must be the answer). A node that failed is skipped for a while in this isolate (markFailed).
 */
import { RESUME_HEADERS, resumeHeader, resumeSignedExtra } from '../../../shared/src/resume-wire.ts'
import { signRequest } from '../../../shared/src/signature.ts'
import { andThen } from '../../../shared/src/maybe-promise.ts'
import { SUPERSEDE_AT_HEADER, SUPERSEDE_HEADER } from '../../../shared/src/supersede.ts'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import { MAX_ATTEMPTS, MAX_RESUMES, type ForwardDeps, type ForwardRequest } from './forward-request.ts'
import { targetUrl } from './target-url.ts'
import { UpstreamTimeout, type UpstreamHeaders, type UpstreamResponse } from './upstream-fetch.ts'

/** Statuses that mean "this node cannot take it now": retried on another node. */
const OVERLOADED_STATUSES = new Set([503, 529])

/** The client left before the node answered: nothing to send. */
export class ClientGone extends Error {
  override readonly name = 'ClientGone'
}

export type Attempt =
  | { ok: true; res: UpstreamResponse }
  /** `slow`: connected, but no headers within the timeout; `overloaded`: it answered 503/529. */
  | { ok: false; slow?: boolean; overloaded?: { status: number; headers: UpstreamHeaders; body: Uint8Array } }

export type FailedAttempt = Extract<Attempt, { ok: false }>

export async function send(node: RankedNode, req: ForwardRequest, deps: ForwardDeps, headersTimeoutMs: number): Promise<Attempt> {
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
  const added: Record<string, string> = {}
  if (req.resumable && (deps.maxResumes ?? MAX_RESUMES) > 0) {
    // Every stream asks for id lines (the edge's delivery record) and carries its fixed seed;
    // with resume off (MAX_RESUMES=0) the stream is the plain pipe, without id lines.
    added[RESUME_HEADERS.resumable] = '1'
    if (req.seed !== undefined) added[RESUME_HEADERS.seed] = String(req.seed)
    if (req.resume) added[RESUME_HEADERS.resume] = resumeHeader(req.resume.tokens, req.resume.flushed)
  }
  if (req.supersede !== undefined) {
    added[SUPERSEDE_HEADER] = req.supersede
    added[SUPERSEDE_AT_HEADER] = String(req.startedAtMs)
  }
  const extra = resumeSignedExtra((name) => added[name])
  const signature = signRequest({ secret: deps.secret, method: 'POST', path: signedPath, requestId: req.requestId, body: req.body, nowMs, extra }, deps.digest)
  // The literal first and the resume and supersede fields assigned after: a literal that starts with a spread
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
  }, added)
  return andThen(signature, headers)
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
export function markFailed(node: RankedNode, attempt: FailedAttempt, deps: ForwardDeps): void {
  deps.markDown(node.id, attempt.overloaded ? retryHintMs(attempt.overloaded.headers) : attempt.slow ? MAX_ATTEMPTS * deps.connectTimeoutMs : undefined)
}

/** The node's own retry hint for an overload answer, in ms (1 s when it gave none). */
function retryHintMs(headers: UpstreamHeaders): number {
  const ms = Number(headers.get('retry-after-ms'))
  if (Number.isFinite(ms) && ms > 0) return ms
  const s = Number(headers.get('retry-after'))
  return Number.isFinite(s) && s > 0 ? s * 1000 : 1000
}
