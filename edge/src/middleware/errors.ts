/**
 * Every error becomes the dialect's error response here, and only here: ApiErrors with their own
 * status and safe message, anything else as the fixed 500 (its details go to the log, never to
 * the client). The dialect is the one whose error shape fits the path (auth and limit errors on
 * /v1/messages are Anthropic's). Log lines carry the request id and the error code, never a key
 * or a body.
 */
import type { Context, ErrorHandler, NotFoundHandler } from 'hono'
import { ApiError, toApiError } from '../../../shared/src/api-error.ts'
import type { DialectTable } from '../../../shared/src/dialects/index.ts'
import { renderError } from '../../../shared/src/error-body.ts'
import type { AppEnv } from '../context.ts'

export function onError(dialects: DialectTable, log: (line: Record<string, unknown>) => void = defaultLog): ErrorHandler<AppEnv> {
  return (err, c) => {
    const apiError = toApiError(err)
    if (apiError.code === 'internal') {
      const cause = apiError.cause ?? err
      log({ level: 'error', msg: 'unhandled error', requestId: c.get('requestId'), path: c.req.path, error: cause instanceof Error ? cause.name : typeof cause, detail: cause instanceof Error ? cause.message : undefined })
    }
    return errorResponse(c, dialects, apiError)
  }
}

export function notFound(dialects: DialectTable): NotFoundHandler<AppEnv> {
  return (c) => errorResponse(c, dialects, new ApiError('not_found', `Unknown route: ${c.req.method} ${c.req.path.slice(0, 200)}`))
}

function errorResponse(c: Context<AppEnv>, dialects: DialectTable, err: ApiError): Response {
  const rendered = renderError(dialects.errorCodecForPath(c.req.path).errors, err)
  return new Response(JSON.stringify(rendered.body), { status: rendered.status, headers: rendered.headers })
}

function defaultLog(line: Record<string, unknown>): void {
  console.error(JSON.stringify(line))
}
