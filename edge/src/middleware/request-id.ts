/**
 * Step 1 of every request: an `x-request-id` (the client's when it is sane, else a new one) and
 * a W3C trace span continuing the client's `traceparent` or starting a trace. Both are echoed on
 * the response, whatever answers it (an error included).
 */
import type { Context, MiddlewareHandler } from 'hono'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import { continueTrace, formatTraceparent } from '../../../shared/src/trace-context.ts'
import type { AppEnv } from '../app-env.ts'

/** A client id is kept only if it is short and plain: it ends up in logs, metrics and a signature. */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

export function requestId(now: () => number): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    c.set('startedAtMs', now())
    const given = c.req.header(WIRE_HEADERS.requestId)
    const id = given && CLIENT_REQUEST_ID.test(given) ? given : `req_${crypto.randomUUID().replaceAll('-', '')}`
    c.set('requestId', id)
    c.set('trace', continueTrace(c.req.header(WIRE_HEADERS.traceparent)).ctx)
    await next()
    if (c.get('edgeHeadersAdded')) return
    for (const [name, value] of Object.entries(requestIdHeaders(c))) c.res.headers.set(name, value)
  }
}

/** x-request-id and traceparent as they go on the response (a forwarded one takes them in its own record: generate.ts). */
export function requestIdHeaders(c: Context<AppEnv>): Record<string, string> {
  return { [WIRE_HEADERS.requestId]: c.get('requestId'), [WIRE_HEADERS.traceparent]: formatTraceparent(c.get('trace')) }
}
