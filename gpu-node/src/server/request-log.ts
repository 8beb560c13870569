/** One structured line per generate request: ids, timing, tokens. Never prompts, bodies or keys. */
import type { Logger } from './json-log.ts'
import type { RequestContext } from './request-context.ts'

export function logRequest(log: Logger, ctx: RequestContext): void {
  const o = ctx.outcome
  log.info({
    msg: 'request',
    requestId: ctx.requestId,
    traceparent: ctx.wire.traceparent,
    path: ctx.path,
    status: ctx.res.statusCode,
    dialect: o.dialect,
    promptTokens: o.promptTokens,
    completionTokens: o.completionTokens,
    finishReason: o.finishReason,
    error: o.errorCode,
    ttftMs: ctx.timer.ttftMs(),
    durationMs: ctx.timer.durationMs(),
  })
}
