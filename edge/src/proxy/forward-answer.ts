/**
 * A node's answer as the client's: the headers passed on (and the edge's own about the answer),
 * the body — whole for JSON, piped for a stream — and the Response, made once the caller has
 * added its own headers.
 */
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import type { BodyOutcome } from '../context.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import type { ForwardDeps, ForwardRequest, ForwardResult } from './forward-request.ts'
import { forwardedResponse, type ResponseBody } from './forwarded-response.ts'
import { ClientGone } from './node-attempt.ts'
import type { PipedBody, Relay } from './pass-through.ts'
import type { UpstreamHeaders, UpstreamResponse } from './upstream-fetch.ts'

/** Statuses whose response has no body (a Response with one would throw). */
export const NULL_BODY_STATUSES = new Set([204, 205, 304])
/**
 * Response headers not passed on: those that describe the node's connection, not the content,
 * and the ones the edge sets itself (a node's own value never reaches the client).
 */
const NOT_PASSED_ON = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-connection', 'content-length', 'content-encoding', WIRE_HEADERS.region, 'server-timing', WIRE_HEADERS.failover])

/** The node that answered, the attempts that failed before it, and the headers the client gets. */
export interface Answering {
  node: RankedNode
  failed: number
  headers: Record<string, string>
}

/** When the edge received the request, sent it upstream, and had the node's headers (epoch ms). */
export interface AnswerTiming {
  startedAtMs: number
  upstreamStartMs: number
  headersAtMs: number
}

export interface AnswerParts {
  status: number
  body: ResponseBody
  finished: Promise<BodyOutcome>
  sse?: boolean
  relay?: Relay
}

/**
 * The Response's body: none for an event stream the server will relay (`relayedStreams`), so the
 * pass-through never makes its web stream; the web stream otherwise.
 */
export function clientBody(piped: PipedBody, sse: boolean, deps: ForwardDeps): ResponseBody {
  return sse && piped.relay && deps.relayedStreams ? null : piped.readable
}

/**
 * A non-streaming answer is one JSON document the client can only use whole, so the edge takes
 * it whole (bytes untouched) and answers with headers and body in one write — rather than headers
 * first and the body as a stream, a second socket write that cost more CPU than the rest of the
 * response. A node that breaks off mid-body is answered undefined: forward asks the next node
 * (the client never saw a byte), and only when every node failed is it a clean 502.
 */
export async function wholeAnswer(res: UpstreamResponse, answering: Answering, req: ForwardRequest, deps: ForwardDeps): Promise<ForwardResult | undefined> {
  let bytes: ArrayBuffer
  try {
    bytes = await res.arrayBuffer()
  } catch {
    if (req.signal?.aborted) throw new ClientGone()
    return undefined
  }
  const finished = Promise.resolve<BodyOutcome>({ kind: 'complete', firstByteAtMs: deps.now() })
  // A Uint8Array (not the ArrayBuffer): @hono/node-server's Response keeps it as is and writes
  // it with the headers in one call, without building a web stream around it.
  return answered(answering, { status: res.status, body: new Uint8Array(bytes), finished })
}

/** A ForwardResult whose Response is made when the caller has its own headers to add. */
export function answered({ node, failed, headers }: Answering, { status, body, finished, sse = false, relay }: AnswerParts): ForwardResult {
  return {
    status,
    node,
    failedAttempts: failed,
    finished,
    respond: (addEdgeHeaders) => {
      addEdgeHeaders?.(headers)
      return forwardedResponse(body, { status, headers, sse, relay })
    },
  }
}

/**
 * The node's headers that are passed on, and the edge's own about the answer, as one plain record
 * (forwarded-response.ts says why): one pass that skips what is not passed on. A name the node
 * sent twice is joined as a Headers object would join it.
 */
export function responseHeaders(upstream: UpstreamHeaders, node: RankedNode, failed: number, { startedAtMs, upstreamStartMs, headersAtMs }: AnswerTiming): Record<string, string> {
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

