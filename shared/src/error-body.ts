/**
 * The one place an ApiError becomes HTTP: status, JSON body and headers per dialect, and the
 * error frame that ends a stream which already started. Both official SDKs pick their error class
 * from the status (400 BadRequest, 401 Authentication, 403 PermissionDenied, 404 NotFound,
 * 413 ContentTooLarge (Anthropic), 429 RateLimit, >=500 InternalServer and its subclasses) and
 * retry 408/409/429/5xx, honouring `x-should-retry`, `retry-after-ms`, then `retry-after`.
 */

import { toApiError, type ApiError, type ApiErrorCode } from './api-error.ts'
import type { Dialect } from './generation.ts'
import { sseData, sseEvent } from './sse.ts'

interface ErrorStyle {
  openaiStatus: number
  /** OpenAI's `error.type`. */
  openaiType: string
  anthropicStatus: number
  /** Anthropic's `error.type` (the list in DESIGN.md §6). */
  anthropicType: string
  /** Sends `x-should-retry: true`: the client did nothing wrong and a retry may succeed. */
  shouldRetry: boolean
}

const STYLES: Record<ApiErrorCode, ErrorStyle> = {
  invalid_request: style(400, 'invalid_request_error', 400, 'invalid_request_error'),
  invalid_json: style(400, 'invalid_request_error', 400, 'invalid_request_error'),
  context_length_exceeded: style(400, 'invalid_request_error', 400, 'invalid_request_error'),
  unauthorized: style(401, 'authentication_error', 401, 'authentication_error'),
  forbidden: style(403, 'permission_error', 403, 'permission_error'),
  // OpenAI reports an unknown model as invalid_request_error with code model_not_found.
  model_not_found: style(404, 'invalid_request_error', 404, 'not_found_error'),
  not_found: style(404, 'invalid_request_error', 404, 'not_found_error'),
  request_too_large: style(413, 'invalid_request_error', 413, 'request_too_large'),
  rate_limited: style(429, 'rate_limit_error', 429, 'rate_limit_error', true),
  // Overload is each API's own answer: OpenAI (and vLLM) 503, Anthropic 529 overloaded_error.
  overloaded: style(503, 'server_error', 529, 'overloaded_error', true),
  // No GPU node could be reached (connect errors on every failover attempt): 502 Bad Gateway in
  // both dialects, so a user (and our metrics) can tell "we cannot reach capacity" from "capacity
  // is full" (503/529). Both SDKs retry any 5xx, so nothing is lost by not reusing 503/529.
  upstream_unavailable: style(502, 'server_error', 502, 'api_error'),
  // Anthropic documents 504 timeout_error; its SDK maps 504 to GatewayTimeoutError.
  timeout: style(504, 'server_error', 504, 'timeout_error'),
  internal: style(500, 'server_error', 500, 'api_error'),
}

function style(openaiStatus: number, openaiType: string, anthropicStatus: number, anthropicType: string, shouldRetry = false): ErrorStyle {
  return { openaiStatus, openaiType, anthropicStatus, anthropicType, shouldRetry }
}

export interface RenderedError {
  status: number
  body: object
  headers: Record<string, string>
}

/** The HTTP status an error code gets in a dialect. */
export function errorStatus(dialect: Dialect, code: ApiErrorCode): number {
  return isAnthropic(dialect) ? STYLES[code].anthropicStatus : STYLES[code].openaiStatus
}

/** An error answered before any body byte: status, dialect JSON body and headers. */
export function renderError(dialect: Dialect, e: unknown): RenderedError {
  const err = toApiError(e)
  return { status: errorStatus(dialect, err.code), body: errorBody(dialect, err), headers: errorHeaders(err) }
}

/** The frame that ends a stream which already started (the caller closes the stream after it). */
export function renderStreamError(dialect: Dialect, e: unknown): string {
  const err = toApiError(e)
  return isAnthropic(dialect) ? sseEvent('error', errorBody(dialect, err)) : sseData(errorBody(dialect, err))
}

function errorBody(dialect: Dialect, err: ApiError): object {
  const s = STYLES[err.code]
  if (isAnthropic(dialect)) return { type: 'error', error: { type: s.anthropicType, message: err.message } }
  return { error: { message: err.message, type: s.openaiType, param: err.param ?? null, code: err.code } }
}

function errorHeaders(err: ApiError): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (err.retryAfterMs !== undefined) {
    headers['retry-after-ms'] = String(Math.ceil(err.retryAfterMs))
    headers['retry-after'] = String(Math.ceil(err.retryAfterMs / 1000))
  }
  if (STYLES[err.code].shouldRetry) headers['x-should-retry'] = 'true'
  return headers
}

function isAnthropic(dialect: Dialect): boolean {
  return dialect === 'anthropic-messages'
}
