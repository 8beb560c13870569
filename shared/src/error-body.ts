/**
 * The one place an ApiError becomes HTTP: status, JSON body and headers, and the frame that ends
 * a stream which already started, for any dialect from its codec's ErrorShape. What is the same
 * in every dialect lives here: the retry headers. Both official SDKs pick their error class from
 * the status (400 BadRequest, 401 Authentication, 403 PermissionDenied, 404 NotFound,
 * 413 ContentTooLarge (Anthropic), 429 RateLimit, >=500 InternalServer and its subclasses) and
 * retry 408/409/429/5xx, honouring `x-should-retry`, `retry-after-ms`, then `retry-after`.
 */

import { toApiError, type ApiError, type ApiErrorCode } from './api-error.ts'

/** What one API answers for an error code. */
export interface ErrorCodeShape {
  status: number
  /** The API's `error.type`. */
  type: string
}

/** How one dialect shapes errors (each codec has one: `DialectCodec.errors`). */
export interface ErrorShape {
  /** Every code, so a new code cannot ship without a status in each dialect. */
  readonly codes: Readonly<Record<ApiErrorCode, ErrorCodeShape>>
  /** The JSON body; `type` is the code's `error.type`. */
  body(err: ApiError, type: string): object
  /** The SSE frame that carries `body` as a stream's last event. */
  streamFrame(body: object): string
}

export interface RenderedError {
  status: number
  body: object
  headers: Record<string, string>
}

/** Codes that send `x-should-retry: true`: the client did nothing wrong and a retry may succeed. */
const SHOULD_RETRY: ReadonlySet<ApiErrorCode> = new Set(['rate_limited', 'overloaded'])

/** An error answered before any body byte: status, dialect JSON body and headers. */
export function renderError(shape: ErrorShape, e: unknown): RenderedError {
  const err = toApiError(e)
  const code = shape.codes[err.code]
  return { status: code.status, body: shape.body(err, code.type), headers: errorHeaders(err) }
}

/** The frame that ends a stream which already started (the caller closes the stream after it). */
export function renderStreamError(shape: ErrorShape, e: unknown): string {
  const err = toApiError(e)
  return shape.streamFrame(shape.body(err, shape.codes[err.code].type))
}

function errorHeaders(err: ApiError): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (err.retryAfterMs !== undefined) {
    headers['retry-after-ms'] = String(Math.ceil(err.retryAfterMs))
    headers['retry-after'] = String(Math.ceil(err.retryAfterMs / 1000))
  }
  if (SHOULD_RETRY.has(err.code)) headers['x-should-retry'] = 'true'
  return headers
}
