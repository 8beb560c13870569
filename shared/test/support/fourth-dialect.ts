/**
 * Test support only, never served: a small fourth dialect, written the way a real one would be
 * (its codec in one file) and registered the way production registers the real three (one entry
 * in a dialectTable). Tests use it to show that the edge, the node and the error rendering need
 * no edit for a new dialect. Its wire format is made up: `{ model, prompt, max_tokens?, stream? }`
 * in, `event: text` / `event: done` frames out, errors as `{ failure: { kind, detail } }`.
 */

import { z } from 'zod'
import { ApiError } from '../../src/api-error.ts'
import { renderStreamError, type ErrorShape } from '../../src/error-body.ts'
import type { GenerateRequest } from '../../src/generation.ts'
import { DIALECTS, dialectTable, type DialectCodec } from '../../src/dialects/index.ts'
import { maxTokensField, samplingFields, toSamplingRequest } from '../../src/dialects/sampling-fields.ts'
import { validateBody } from '../../src/dialects/validate-body.ts'
import { sseEvent } from '../../src/sse.ts'

export const FourthRequest = z.strictObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  max_tokens: maxTokensField.optional(),
  stream: z.boolean().optional(),
  ...samplingFields,
})
export type FourthRequest = z.infer<typeof FourthRequest>

function parseFourthRequest(body: unknown): GenerateRequest {
  const req = validateBody(FourthRequest, body, {})
  const out: GenerateRequest = {
    dialect: 'fourth',
    model: req.model,
    input: { kind: 'text', prompt: req.prompt },
    stop: [],
    sampling: toSamplingRequest(req),
    stream: req.stream ?? false,
    includeUsage: false,
  }
  if (req.max_tokens !== undefined) out.maxTokens = req.max_tokens
  return out
}

export const FOURTH_ERRORS: ErrorShape = {
  codes: {
    invalid_request: { status: 400, type: 'bad_request' },
    invalid_json: { status: 400, type: 'bad_json' },
    context_length_exceeded: { status: 400, type: 'too_long' },
    unauthorized: { status: 401, type: 'who_are_you' },
    forbidden: { status: 403, type: 'not_yours' },
    model_not_found: { status: 404, type: 'no_such_model' },
    not_found: { status: 404, type: 'no_such_thing' },
    request_too_large: { status: 413, type: 'too_big' },
    rate_limited: { status: 429, type: 'slow_down' },
    overloaded: { status: 503, type: 'busy' },
    upstream_unavailable: { status: 502, type: 'unreachable' },
    timeout: { status: 504, type: 'late' },
    internal: { status: 500, type: 'oops' },
  },
  body: (err, type) => ({ failure: { kind: type, detail: err.message } }),
  streamFrame: (body) => sseEvent('failure', body),
}

export const fourthDialectCodec: DialectCodec<'fourth'> = {
  name: 'fourth',
  path: '/v1/fourth',
  parse: parseFourthRequest,
  streamEncoder: () => ({
    start: () => '',
    text: (delta) => (delta === '' ? '' : sseEvent('text', { text: delta })),
    finish: (reason, usage) => sseEvent('done', { reason, output_tokens: usage.completionTokens }),
    error: (err) => renderStreamError(FOURTH_ERRORS, err),
  }),
  jsonBody: (meta, text, reason, usage) => ({ id: `fourth-${meta.requestId}`, text, reason, output_tokens: usage.completionTokens }),
  errors: FOURTH_ERRORS,
  limitHeaders: {
    names: {
      requests: { limit: 'fourth-requests-limit', remaining: 'fourth-requests-left', reset: 'fourth-requests-reset-s' },
      tokens: { limit: 'fourth-tokens-limit', remaining: 'fourth-tokens-left', reset: 'fourth-tokens-reset-s' },
    },
    reset: (resetMs) => String(Math.ceil(resetMs / 1000)),
  },
  contextLengthExceeded: {
    prompt: (promptTokens, contextLength) =>
      new ApiError('context_length_exceeded', `fourth: a ${promptTokens}-token prompt fills the ${contextLength}-token context`, { param: 'prompt' }),
    request: (promptTokens, maxTokens, contextLength) =>
      new ApiError('context_length_exceeded', `fourth: ${promptTokens} + ${maxTokens} tokens exceed the ${contextLength}-token context`, { param: 'max_tokens' }),
  },
}

/** The served dialects plus the fourth: the one registration line a new dialect needs (as in index.ts). */
export const DIALECTS_WITH_FOURTH = dialectTable([...DIALECTS.codecs, fourthDialectCodec])
