/**
 * The one place an ApiError becomes HTTP: status, JSON body and headers, and the frame that ends
 * a stream which already started, for any dialect from its codec's ErrorShape. What is the same
 * in every dialect lives here: the retry headers. Both official SDKs pick their error class from
 * the status (400 BadRequest, 401 Authentication, 403 PermissionDenied, 404 NotFound,
 * 413 ContentTooLarge (Anthropic), 429 RateLimit, >=500 InternalServer and its subclasses) and
 * retry 408/409/429/5xx, honouring `x-should-retry`, `retry-after-ms`, then `retry-after`.
 */

import { toApiError, type ApiError, type ApiErrorCode } from './api-error.ts'

/**
 * Each code's HTTP status, what both SDKs pick their error class from. It is the same in every
 * dialect unless a dialect's shape says otherwise (Anthropic's 529 for overload).
 */
const STATUS: Readonly<Record<ApiErrorCode, number>> = {
  invalid_request: 400,
  invalid_json: 400,
  context_length_exceeded: 400,
  unauthorized: 401,
  forbidden: 403,
  model_not_found: 404,
  not_found: 404,
  request_too_large: 413,
  // A body that is not declared as JSON (FastAPI's and so vLLM's answer to it).
  unsupported_media_type: 415,
  rate_limited: 429,
  // Overload is OpenAI's (and vLLM's) 503.
  overloaded: 503,
  // No GPU node could be reached (connect errors on every failover attempt): 502 Bad Gateway, so
  // a user (and our metrics) can tell "we cannot reach capacity" from "capacity is full". Both
  // SDKs retry any 5xx, so nothing is lost by not reusing the overload status.
  upstream_unavailable: 502,
  // Anthropic documents 504 timeout_error; its SDK maps 504 to GatewayTimeoutError.
  timeout: 504,
  internal: 500,
  // A newer request with the same x-zl-supersede key replaced this one: 409 Conflict, which both
  // SDKs raise as ConflictError (and would retry, but for x-should-retry: false).
  superseded: 409,
}

/** How one dialect shapes errors (each codec has one: `DialectCodec.errors`). */
export interface ErrorShape {
  /** The API's `error.type` for every code, so a new code cannot ship without one in each dialect. */
  readonly types: Readonly<Record<ApiErrorCode, string>>
  /** Where the dialect's status differs from STATUS. */
  readonly statuses?: Readonly<Partial<Record<ApiErrorCode, number>>>
  /** The JSON body; `type` is the code's `error.type`. */
  body(err: ApiError, type: string): object
  /** The SSE frame that carries `body` as a stream's last event. */
  streamFrame(body: object): string
}

/** `codes`, each mapped to `type`: for the rows of a dialect's `types` that share one. */
export function sameType<C extends ApiErrorCode>(type: string, codes: readonly C[]): Record<C, string> {
  return Object.fromEntries(codes.map((c) => [c, type])) as Record<C, string>
}

export interface RenderedError {
  status: number
  body: object
  headers: Record<string, string>
}

/** Codes that send `x-should-retry: true`: the client did nothing wrong and a retry may succeed. */
const SHOULD_RETRY: ReadonlySet<ApiErrorCode> = new Set(['rate_limited', 'overloaded'])
/** Codes that send `x-should-retry: false` where the SDKs would retry the status by default. */
const SHOULD_NOT_RETRY: ReadonlySet<ApiErrorCode> = new Set(['superseded'])

/** An error answered before any body byte: status, dialect JSON body and headers. */
export function renderError(shape: ErrorShape, e: unknown): RenderedError {
  const err = toApiError(e)
  return { status: errorStatus(shape, err.code), body: shape.body(err, shape.types[err.code]), headers: errorHeaders(err) }
}

/** The HTTP status `code` gets in the dialect of `shape`. */
export function errorStatus(shape: ErrorShape, code: ApiErrorCode): number {
  return shape.statuses?.[code] ?? STATUS[code]
}

/** The frame that ends a stream which already started (the caller closes the stream after it). */
export function renderStreamError(shape: ErrorShape, e: unknown): string {
  const err = toApiError(e)
  return shape.streamFrame(shape.body(err, shape.types[err.code]))
}

function errorHeaders(err: ApiError): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (err.retryAfterMs !== undefined) {
    headers['retry-after-ms'] = String(Math.ceil(err.retryAfterMs))
    headers['retry-after'] = String(Math.ceil(err.retryAfterMs / 1000))
  }
  if (SHOULD_RETRY.has(err.code)) headers['x-should-retry'] = 'true'
  if (SHOULD_NOT_RETRY.has(err.code)) headers['x-should-retry'] = 'false'
  return headers
}
