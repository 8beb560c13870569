/**
 * How the two OpenAI dialects (chat and completions) say what went wrong: statuses, `error.type`s
 * and the `{ error: { message, type, param, code } }` body, the stream's error line, and vLLM's
 * context-length messages (what users of OpenAI-compatible servers know).
 */

import { ApiError } from '../api-error.ts'
import { sameType, type ErrorShape } from '../error-body.ts'
import { sseData } from '../sse.ts'
import type { ContextLengthErrors } from './codec.ts'

export const OPENAI_ERRORS: ErrorShape = {
  // The statuses are error-body.ts's common ones (overload 503, as OpenAI and vLLM answer).
  types: {
    // OpenAI reports an unknown model as invalid_request_error too, with code model_not_found.
    ...sameType('invalid_request_error', ['invalid_request', 'invalid_json', 'context_length_exceeded', 'model_not_found', 'not_found', 'request_too_large', 'unsupported_media_type', 'superseded']),
    unauthorized: 'authentication_error',
    forbidden: 'permission_error',
    rate_limited: 'rate_limit_error',
    ...sameType('server_error', ['overloaded', 'upstream_unavailable', 'timeout', 'internal']),
  },
  body: (err, type) => ({ error: { message: err.message, type, param: err.param ?? null, code: err.code } }),
  // Mid-stream, one `data:` line with the same body; the SDK raises it as an APIError.
  streamFrame: sseData,
}

/** A stream's last frame (`data: [DONE]`) and its error line: where an OpenAI stream ends. */
export const OPENAI_STREAM_ENDS = ['data: [DONE]', 'data: {"error"'] as const

/** vLLM's wording; `promptParam` is the request field holding the prompt (`messages` or `prompt`). */
export function vllmContextLengthExceeded(promptParam: 'messages' | 'prompt' | 'input'): ContextLengthErrors {
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
