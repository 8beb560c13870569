/**
 * Step 1 of every request: an `x-request-id` (the client's when it is sane, else a new one) and
 * a W3C trace span continuing the client's `traceparent` or starting a trace. Both are echoed on
 * the response, whatever answers it (an error included).
 */
import type { Context } from 'hono'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import { randomHex } from '../../../shared/src/random-pool.ts'
import { continueTrace, formatTraceparent } from '../../../shared/src/trace-context.ts'
import type { AppEnv, Around } from '../context.ts'

/** A client id is kept only if it is short and plain: it ends up in logs, metrics and a signature. */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

export function requestId(now: () => number): Around {
  return {
    before(c) {
      c.set('startedAtMs', now())
      const given = c.req.header(WIRE_HEADERS.requestId)
      // 32 random hex digits, as a UUID without its dashes was: from the pooled bytes trace ids use.
      c.set('requestId', given && CLIENT_REQUEST_ID.test(given) ? given : `req_${randomHex(16)}`)
      // Formatted once: the wire headers, the response and the log line carry the same string.
      c.set('traceparent', formatTraceparent(continueTrace(c.req.header(WIRE_HEADERS.traceparent)).ctx))
    },
    after(c) {
      if (c.get('edgeHeadersAdded')) return
      c.res.headers.set(WIRE_HEADERS.requestId, c.get('requestId'))
      c.res.headers.set(WIRE_HEADERS.traceparent, c.get('traceparent'))
    },
  }
}

/** x-request-id and traceparent into a forwarded response's own header record (generate.ts). */
export function putRequestIdHeaders(c: Context<AppEnv>, out: Record<string, string>): void {
  out[WIRE_HEADERS.requestId] = c.get('requestId')
  out[WIRE_HEADERS.traceparent] = c.get('traceparent')
}
