/**
 * Test support only, never served: a small fourth dialect, written the way a real one would be
 * (its codec in one file) and registered the way production registers the real three (one entry
 * in a dialectTable). Tests use it to show that the edge, the node and the error rendering need
 * no edit for a new dialect. Its wire format is made up: `{ model, prompt, max_tokens?, stream? }`
 * in, `event: text` / `event: done` frames out, errors as `{ failure: { kind, detail } }`.
 */

import { z } from 'zod'
import { API_ERROR_CODES, ApiError, type ApiErrorCode } from '../../src/api-error.ts'
import { renderStreamError, type ErrorShape } from '../../src/error-body.ts'
import { choiceText, type GenerateRequest } from '../../src/generation.ts'
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
  // Its own error.type per code, and its own status for overload.
  types: Object.fromEntries(API_ERROR_CODES.map((code) => [code, `fourth_${code}`])) as Record<ApiErrorCode, string>,
  statuses: { overloaded: 599 },
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
  jsonBody: (meta, [choice], usage) => ({ id: `fourth-${meta.requestId}`, text: choiceText(choice!), reason: choice!.reason, output_tokens: usage.completionTokens }),
  toolCallIdPrefix: 'call_',
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
  streamEnds: ['event: done', 'event: failure'],
}

/** The served dialects plus the fourth: the one registration line a new dialect needs (as in index.ts). */
export const DIALECTS_WITH_FOURTH = dialectTable([...DIALECTS.codecs, fourthDialectCodec])
