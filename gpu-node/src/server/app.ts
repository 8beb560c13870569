/**
 * The node's request handler: routes by method and path, gives every response an
 * `x-request-id`, turns every failure into the dialect's error shape (unknown → fixed 500),
 * and writes one log line per generate request when its response closes.
 */
import http2, { Http2ServerRequest } from 'node:http2'
import { clipText } from '../../../shared/src/clip-text.ts'
import { ApiError, toApiError } from '../../../shared/src/api-error.ts'
import { dialectForPath, errorCodecForPath } from '../../../shared/src/dialects/index.ts'
import { SUPERSEDE_PATH } from '../../../shared/src/supersede.ts'
import type { ResponsesStore } from '../../../shared/src/dialects/responses-store.ts'
import type { EngineHandle } from '../engine/types.ts'
import type { NodeMetrics } from '../metrics/node-metrics.ts'
import type { PromptEncoder } from '../model/prompt-encoder.ts'
import type { SignatureCheck } from './edge-signature.ts'
import { handleGenerate } from './generate-route.ts'
import { isHttp2, type RequestHandler, type ServerRequest, type ServerResponse } from './http-types.ts'
import { sendHealth, sendMetrics, sendModels, sendReadiness } from './info-routes.ts'
import type { Logger } from './json-log.ts'
import type { NodeState } from './node-state.ts'
import { ClientGoneError } from './read-body.ts'
import { handleSupersedeNotice } from './supersede-route.ts'
import { Supersessions } from './supersessions.ts'
import { RequestContext } from './request-context.ts'
import { logRequest } from './request-log.ts'
import { sendError } from './respond.ts'

export interface AppDeps {
  encoder: PromptEncoder
  engine: EngineHandle
  state: NodeState
  metrics: NodeMetrics
  log: Logger
  checkSignature: SignatureCheck
  maxBodyBytes: number
  keepAliveMs: number
  /** Stored responses (the Responses API's `store`), in the Redis the edge reads them from. */
  responses?: ResponsesStore
}

export function createRequestHandler(deps: AppDeps): RequestHandler {
  const supersessions = new Supersessions()
  const generateDeps = {
    ...deps,
    inFlight: new Set<string>(),
    supersessions,
    // The error's name only: a client library's message may carry the store's URL.
    onKeepFailed: (e: unknown) => deps.log.warn({ msg: 'response store write failed', error: e instanceof Error ? e.name : 'unknown' }),
  }
  return (req, res) => {
    const ctx = new RequestContext(req, res, deps.metrics)
    res.setHeader('x-request-id', ctx.requestId)
    const codec = dialectForPath(ctx.path)
    if (codec && req.method === 'POST') {
      ctx.outcome.dialect = codec.name
      res.once('close', () => logRequest(deps.log, ctx))
      handleGenerate(ctx, codec, generateDeps).catch((e: unknown) => fail(ctx, e, deps))
      return
    }
    if (req.method === 'POST' && ctx.path === SUPERSEDE_PATH) {
      handleSupersedeNotice(ctx, { checkSignature: deps.checkSignature, supersessions }).catch((e: unknown) => fail(ctx, e, deps))
      return
    }
    routeInfo(req, res, ctx, deps).catch((e: unknown) => fail(ctx, e, deps))
  }
}

async function routeInfo(req: ServerRequest, res: ServerResponse, ctx: RequestContext, deps: AppDeps): Promise<void> {
  const route = `${req.method} ${ctx.path}`
  switch (route) {
    case 'GET /v1/models':
      return sendModels(req, res, deps.encoder)
    case 'GET /healthz':
      return sendHealth(req, res)
    case 'GET /readyz':
      return sendReadiness(req, res, deps.state)
    case 'GET /metrics':
      return sendMetrics(req, res, deps.metrics)
  }
  const known = dialectForPath(ctx.path) !== undefined || ['/v1/models', '/healthz', '/readyz', '/metrics'].includes(ctx.path)
  const message = known ? `Method ${req.method} is not allowed on ${ctx.path}.` : `Unknown route: ${req.method} ${clipText(ctx.path)}.`
  throw new ApiError(known ? 'invalid_request' : 'not_found', message)
}

/** The one catch: a dialect-shaped answer if nothing was sent yet, else end what was started. */
function fail(ctx: RequestContext, e: unknown, deps: AppDeps): void {
  if (e instanceof ClientGoneError || ctx.clientGone) {
    ctx.outcome.errorCode ??= 'client_aborted'
    ctx.timer.fail('client_aborted')
    return
  }
  const err = toApiError(e)
  if (err.code === 'internal') deps.log.error({ msg: 'unhandled error', requestId: ctx.requestId, path: ctx.path, error: describe(err.cause) })
  if (ctx.outcome.dialect) {
    ctx.outcome.errorCode = err.code
    ctx.timer.fail(err.code)
  }
  const { res } = ctx
  if (res.headersSent) {
    res.destroy()
    return
  }
  const tooLarge = err.code === 'request_too_large'
  // An unread request body (413) is not drained: HTTP/1.1 closes the connection after the answer,
  // HTTP/2 resets just this stream with NO_ERROR once the answer is out (RFC 9113 §8.1).
  const headers = tooLarge && !isHttp2(ctx.req) ? { connection: 'close' } : {}
  if (tooLarge && ctx.req instanceof Http2ServerRequest) {
    const stream = ctx.req.stream
    res.once('finish', () => stream.close(http2.constants.NGHTTP2_NO_ERROR))
  }
  sendError(ctx.req, res, errorCodecForPath(ctx.path), err, headers)
}

/** Error class and message for our own log only; never sent to a client. */
function describe(cause: unknown): string {
  if (cause instanceof Error) return `${cause.name}: ${cause.message}`.slice(0, 500)
  return typeof cause
}
