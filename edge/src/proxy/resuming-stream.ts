/**
 * A stream that outlives its node (DESIGN.md §4 Resume): the node's body wrapped in a resumable
 * body, which on a failure continues the stream on another node handed the delivered tokens.
 */
import type { BodyOutcome } from '../context.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import { answered, clientBody, type Answering } from './forward-answer.ts'
import { MAX_ATTEMPTS, MAX_RESUMES, STREAM_STALL_MS, type ForwardDeps, type ForwardRequest, type ForwardResult } from './forward-request.ts'
import { streamEndsOf } from './frame-scanner.ts'
import { send } from './node-attempt.ts'
import { passThrough } from './pass-through.ts'
import { resumableBody } from './resumable-body.ts'
import type { UpstreamResponse } from './upstream-fetch.ts'

/**
 * A stream that can outlive its node: the node's body wrapped in a resumable body, which on a
 * failure continues it on the next ranked node that is neither down nor already failed, handed
 * the delivered tokens. Each continuation tries up to MAX_ATTEMPTS nodes, each bounded by the
 * connect timeout; what is left of the pipe (relay, error event, client cancel) is unchanged.
 */
export function resumingStream(first: UpstreamResponse, answering: Answering, nodes: readonly RankedNode[], req: ForwardRequest, deps: ForwardDeps): ForwardResult {
  const dead = new Set<string>()
  let serving = answering.node
  const body = resumableBody(first, {
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
  return answered(answering, { status: 200, body: clientBody(piped, true, deps), finished, sse: true, relay: piped.relay })
}

