/**
 * The one error type that crosses layer boundaries. Its `code` is stable snake_case and doubles
 * as a metric label; its `message` is safe to show a client. Rendering per dialect (status, body,
 * headers) is error-body.ts's, from each dialect codec's error shape.
 */

/** Every error code, once: the ApiErrorCode type is read off this list. */
export const API_ERROR_CODES = [
  'invalid_request',
  'invalid_json',
  'context_length_exceeded',
  'unauthorized',
  'forbidden',
  'model_not_found',
  'not_found',
  'request_too_large',
  'unsupported_media_type',
  'rate_limited',
  'overloaded',
  'upstream_unavailable',
  'timeout',
  'internal',
  'superseded',
] as const

export type ApiErrorCode = (typeof API_ERROR_CODES)[number]

/** What every unexpected failure says to the client: the original message may hold secrets or internals. */
export const INTERNAL_ERROR_MESSAGE = 'The server had an error while processing your request.'

export interface ApiErrorOptions {
  /** The request field at fault, as a path like `messages[0].content`. */
  param?: string
  /** How long the client should wait before retrying, in ms (rendered as retry-after headers). */
  retryAfterMs?: number
  /** The underlying error, for logs only: never rendered. */
  cause?: unknown
}

export class ApiError extends Error {
  override readonly name = 'ApiError'
  readonly code: ApiErrorCode
  readonly param?: string
  readonly retryAfterMs?: number

  constructor(code: ApiErrorCode, message: string, options: ApiErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
    if (options.param !== undefined) this.param = options.param
    if (options.retryAfterMs !== undefined) this.retryAfterMs = Math.max(0, options.retryAfterMs)
  }
}

/**
 * Any thrown value as an ApiError. ApiErrors pass through; a timeout DOMException (from
 * `AbortSignal.timeout`) becomes `timeout`; everything else becomes `internal` with the fixed
 * message, keeping the original only as `cause` for logs.
 */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e
  if (isNamedError(e, 'TimeoutError')) return new ApiError('timeout', 'The request timed out.', { cause: e })
  return new ApiError('internal', INTERNAL_ERROR_MESSAGE, { cause: e })
}

function isNamedError(e: unknown, name: string): boolean {
  return typeof e === 'object' && e !== null && (e as { name?: unknown }).name === name
}
