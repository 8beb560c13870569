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
import type { RankedNode } from '../routing/pick-node.ts'
import { answered, clientBody, NULL_BODY_STATUSES, responseHeaders, wholeAnswer } from './forward-answer.ts'
import { MAX_ATTEMPTS, MAX_RESUMES, type ForwardDeps, type ForwardRequest, type ForwardResult } from './forward-request.ts'
import { HedgedAttempts } from './hedged-attempts.ts'
import { markFailed, send, type Attempt, type FailedAttempt } from './node-attempt.ts'
import { passThrough } from './pass-through.ts'
import { resumingStream } from './resuming-stream.ts'

export async function forward(nodes: readonly RankedNode[], req: ForwardRequest, deps: ForwardDeps): Promise<ForwardResult> {
  const upstreamStartMs = deps.now()
  let failed = 0
  let lastOverload: FailedAttempt['overloaded']
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
      const headers = responseHeaders(attempt.res.headers, node, failed, { startedAtMs: req.startedAtMs, upstreamStartMs, headersAtMs: deps.now() })
      const answering = { node, failed, headers }
      const sse = (attempt.res.headers.get('content-type') ?? '').startsWith('text/event-stream')
      // Decided without touching `body`: the Node upstream builds a web stream only when asked.
      if (NULL_BODY_STATUSES.has(attempt.res.status)) {
        return answered(answering, { status: attempt.res.status, body: null, finished: Promise.resolve({ kind: 'complete' }) })
      }
      if (!req.stream && !sse) {
        const answer = await wholeAnswer(attempt.res, answering, req, deps)
        // A node that died while sending its JSON answer: the request is simply asked again elsewhere.
        if (answer) return answer
        // Not marked down: like a broken stream, it says less about the node than a refused connection.
        failed++
        brokeMidBody = true
        attempts.moveOn()
        continue
      }
      if (req.resumable && sse && attempt.res.status === 200 && (deps.maxResumes ?? MAX_RESUMES) > 0) return resumingStream(attempt.res, answering, nodes, req, deps)
      const piped = passThrough(attempt.res, { codec: req.codec, sse, now: deps.now })
      return answered(answering, { status: attempt.res.status, body: clientBody(piped, sse, deps), finished: piped.finished, sse, relay: piped.relay })
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
    const headers = responseHeaders(lastOverload.headers, lastOverloadNode, failed - 1, { startedAtMs: req.startedAtMs, upstreamStartMs, headersAtMs: deps.now() })
    return answered({ node: lastOverloadNode, failed: failed - 1, headers }, { status: lastOverload.status, body: lastOverload.body, finished: Promise.resolve({ kind: 'complete' }) })
  }
  if (brokeMidBody) throw new ApiError('upstream_unavailable', 'The GPU node failed while sending this response; please retry.', { retryAfterMs: 1000 })
  if (slow) throw new ApiError('overloaded', 'The GPU nodes serving this model are too busy to answer in time; please retry.', { retryAfterMs: deps.connectTimeoutMs })
  throw new ApiError('upstream_unavailable', 'No GPU node could be reached for this request; please retry.', { retryAfterMs: 1000 })
}

