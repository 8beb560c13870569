/**
 * How Anthropic messages says what went wrong (DESIGN.md §6): statuses, `error.type`s and the
 * `{ type: "error", error: { type, message } }` body, the stream's `event: error`, and
 * Anthropic's own context-length messages.
 */

import { ApiError } from '../api-error.ts'
import { sameType, type ErrorShape } from '../error-body.ts'
import { sseEvent } from '../sse.ts'
import type { ContextLengthErrors } from './codec.ts'

export const ANTHROPIC_ERRORS: ErrorShape = {
  // Anthropic's `error.type` list (DESIGN.md §6); the request's faults share one type.
  types: {
    ...sameType('invalid_request_error', ['invalid_request', 'invalid_json', 'context_length_exceeded', 'unsupported_media_type', 'superseded']),
    unauthorized: 'authentication_error',
    forbidden: 'permission_error',
    ...sameType('not_found_error', ['model_not_found', 'not_found']),
    request_too_large: 'request_too_large',
    rate_limited: 'rate_limit_error',
    overloaded: 'overloaded_error',
    // No GPU node reachable: 502 (error-body.ts says why), so it reads apart from a full fleet.
    ...sameType('api_error', ['upstream_unavailable', 'internal']),
    timeout: 'timeout_error',
  },
  // Overload is Anthropic's own 529 overloaded_error; every other status is the common one.
  statuses: { overloaded: 529 },
  body: (err, type) => ({ type: 'error', error: { type, message: err.message } }),
  // The SDK dispatches on the event name: mid-stream errors are `event: error`.
  streamFrame: (body) => sseEvent('error', body),
}

/** A stream's last event (`message_stop`) and its error event: where an Anthropic stream ends. */
export const ANTHROPIC_STREAM_ENDS = ['event: message_stop', 'event: error'] as const

export const ANTHROPIC_CONTEXT_LENGTH_EXCEEDED: ContextLengthErrors = {
  prompt: (promptTokens, contextLength) =>
    new ApiError('context_length_exceeded', `prompt is too long: ${promptTokens} tokens > ${contextLength - 1} maximum`, { param: 'messages' }),
  request: (promptTokens, maxTokens, contextLength) =>
    new ApiError(
      'context_length_exceeded',
      `input length and \`max_tokens\` exceed context limit: ${promptTokens} + ${maxTokens} > ${contextLength}, decrease input length or \`max_tokens\` and try again`,
      { param: 'max_tokens' },
    ),
}
