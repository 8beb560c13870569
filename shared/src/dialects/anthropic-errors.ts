/**
 * How Anthropic messages says what went wrong (DESIGN.md §6): statuses, `error.type`s and the
 * `{ type: "error", error: { type, message } }` body, the stream's `event: error`, and
 * Anthropic's own context-length messages.
 */

import { ApiError } from '../api-error.ts'
import type { ErrorShape } from '../error-body.ts'
import { sseEvent } from '../sse.ts'
import type { ContextLengthErrors } from './codec.ts'

export const ANTHROPIC_ERRORS: ErrorShape = {
  codes: {
    invalid_request: { status: 400, type: 'invalid_request_error' },
    invalid_json: { status: 400, type: 'invalid_request_error' },
    context_length_exceeded: { status: 400, type: 'invalid_request_error' },
    unauthorized: { status: 401, type: 'authentication_error' },
    forbidden: { status: 403, type: 'permission_error' },
    model_not_found: { status: 404, type: 'not_found_error' },
    not_found: { status: 404, type: 'not_found_error' },
    request_too_large: { status: 413, type: 'request_too_large' },
    rate_limited: { status: 429, type: 'rate_limit_error' },
    // Overload is Anthropic's own 529 overloaded_error.
    overloaded: { status: 529, type: 'overloaded_error' },
    // No GPU node reachable: 502 as in the OpenAI dialects (openai-errors.ts says why), so it
    // reads apart from a full fleet (529).
    upstream_unavailable: { status: 502, type: 'api_error' },
    // Anthropic documents 504 timeout_error; its SDK maps 504 to GatewayTimeoutError.
    timeout: { status: 504, type: 'timeout_error' },
    internal: { status: 500, type: 'api_error' },
  },
  body: (err, type) => ({ type: 'error', error: { type, message: err.message } }),
  // The SDK dispatches on the event name: mid-stream errors are `event: error`.
  streamFrame: (body) => sseEvent('error', body),
}

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
