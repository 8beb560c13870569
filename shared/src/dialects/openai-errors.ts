/**
 * How the two OpenAI dialects (chat and completions) say what went wrong: statuses, `error.type`s
 * and the `{ error: { message, type, param, code } }` body, the stream's error line, and vLLM's
 * context-length messages (what users of OpenAI-compatible servers know).
 */

import { ApiError } from '../api-error.ts'
import type { ErrorShape } from '../error-body.ts'
import { sseData } from '../sse.ts'
import type { ContextLengthErrors } from './codec.ts'

export const OPENAI_ERRORS: ErrorShape = {
  codes: {
    invalid_request: { status: 400, type: 'invalid_request_error' },
    invalid_json: { status: 400, type: 'invalid_request_error' },
    context_length_exceeded: { status: 400, type: 'invalid_request_error' },
    unauthorized: { status: 401, type: 'authentication_error' },
    forbidden: { status: 403, type: 'permission_error' },
    // OpenAI reports an unknown model as invalid_request_error with code model_not_found.
    model_not_found: { status: 404, type: 'invalid_request_error' },
    not_found: { status: 404, type: 'invalid_request_error' },
    request_too_large: { status: 413, type: 'invalid_request_error' },
    rate_limited: { status: 429, type: 'rate_limit_error' },
    // Overload is OpenAI's (and vLLM's) 503.
    overloaded: { status: 503, type: 'server_error' },
    // No GPU node could be reached (connect errors on every failover attempt): 502 Bad Gateway,
    // so a user (and our metrics) can tell "we cannot reach capacity" from "capacity is full"
    // (503). The SDK retries any 5xx, so nothing is lost by not reusing 503.
    upstream_unavailable: { status: 502, type: 'server_error' },
    timeout: { status: 504, type: 'server_error' },
    internal: { status: 500, type: 'server_error' },
  },
  body: (err, type) => ({ error: { message: err.message, type, param: err.param ?? null, code: err.code } }),
  // Mid-stream, one `data:` line with the same body; the SDK raises it as an APIError.
  streamFrame: sseData,
}

/** vLLM's wording; `promptParam` is the request field holding the prompt (`messages` or `prompt`). */
export function vllmContextLengthExceeded(promptParam: 'messages' | 'prompt'): ContextLengthErrors {
  return {
    prompt: (promptTokens, contextLength) =>
      new ApiError(
        'context_length_exceeded',
        `This model's maximum context length is ${contextLength} tokens. However, your ${promptParam} resulted in ${promptTokens} tokens, which leaves no room to generate. Please reduce the length of the ${promptParam}.`,
        { param: promptParam },
      ),
    request: (promptTokens, maxTokens, contextLength) =>
      new ApiError(
        'context_length_exceeded',
        `This model's maximum context length is ${contextLength} tokens. However, you requested ${promptTokens + maxTokens} tokens (${promptTokens} in the ${promptParam}, ${maxTokens} in the completion). Please reduce the length of the ${promptParam} or completion.`,
        { param: 'max_tokens' },
      ),
  }
}
