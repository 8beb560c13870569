/** OpenAI legacy completions (`POST /v1/completions`): request schema, parser, encoders, codec. */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import { renderStreamError } from '../error-body.ts'
import type { CompletedReason, GenerateRequest, Usage } from '../generation.ts'
import { SSE_DONE, sseData } from '../sse.ts'
import type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
import { OPENAI_ERRORS, OPENAI_STREAM_ENDS, vllmContextLengthExceeded } from './openai-errors.ts'
import { nField, OPENAI_UNSUPPORTED, openAIHarmlessFields, promptCacheKeyField, streamFields, toContextId, toOpenAIFinishReason, toOpenAIUsage, toStreamSettings, type OpenAIFinishReason } from './openai-fields.ts'
import { OPENAI_LIMIT_HEADERS } from './openai-limit-headers.ts'
import { maxTokensField, samplingFields, stopField, toSamplingRequest, toStopList } from './sampling-fields.ts'
import { validateBody } from './validate-body.ts'

/** OpenAI's (and vLLM's) default for completions when max_tokens is absent. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16

const promptText = z.string().min(1)

export const CompletionRequest = z.strictObject({
  model: z.string().min(1),
  /** One prompt; OpenAI's one-element array form is accepted too. */
  prompt: z.union([promptText, z.array(promptText).length(1, { error: 'must hold exactly one prompt: send one request per prompt' })]),
  max_tokens: maxTokensField.nullish(),
  stop: stopField(4),
  n: nField,
  /** best_of = 1 is the same as not asking for it. */
  best_of: z.literal(1, { error: 'must be 1: best_of > 1 is not supported' }).nullish(),
  echo: z.boolean().nullish(),
  logprobs: z.null({ error: 'must be null: log probabilities are not available' }).optional(),
  ...samplingFields,
  ...streamFields,
  ...promptCacheKeyField,
  ...openAIHarmlessFields,
})
export type CompletionRequest = z.infer<typeof CompletionRequest>

export function parseCompletionRequest(body: unknown): GenerateRequest {
  rejectTokenPrompts(body)
  const req = validateBody(CompletionRequest, body, OPENAI_UNSUPPORTED)
  const out: GenerateRequest = {
    dialect: 'openai-completions',
    model: req.model,
    input: { kind: 'text', prompt: typeof req.prompt === 'string' ? req.prompt : req.prompt[0]! },
    maxTokens: req.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS,
    stop: toStopList(req.stop),
    sampling: toSamplingRequest(req),
    ...toStreamSettings(req),
  }
  if (req.echo) out.echo = true
  if (req.ignore_eos) out.ignoreEos = true
  const contextId = toContextId(req)
  if (contextId !== undefined) out.contextId = contextId
  return out
}

/** Token-id prompts are valid OpenAI input, so they deserve a better answer than a type error. */
function rejectTokenPrompts(body: unknown): void {
  const prompt = typeof body === 'object' && body !== null ? (body as { prompt?: unknown }).prompt : undefined
  if (Array.isArray(prompt) && prompt.some((p) => typeof p === 'number' || Array.isArray(p))) {
    throw new ApiError('invalid_request', "'prompt' must be text: token-id prompts are not supported.", { param: 'prompt' })
  }
}

export function completionId(requestId: string): string {
  return `cmpl-${requestId}`
}

/** With echo, the caller sends the prompt as the first text() delta (and prefixes it in jsonBody's text), as vLLM does. */
export function completionStreamEncoder(meta: StreamMeta): StreamEncoder {
  // A literal per chunk, not `{ ...base, choices }` (see openai-chat.ts's encoder).
  const id = completionId(meta.requestId)
  const { created, model } = meta
  const chunk = (text: string, finishReason: OpenAIFinishReason | null): string => {
    const choices = [{ text, index: 0, logprobs: null, finish_reason: finishReason }]
    return sseData(meta.includeUsage
      ? { id, object: 'text_completion', created, model, choices, usage: null }
      : { id, object: 'text_completion', created, model, choices })
  }
  return {
    start: () => '',
    text: (delta) => (delta === '' ? '' : chunk(delta, null)),
    finish: (reason: CompletedReason, usage: Usage) => {
      const usageChunk = meta.includeUsage ? sseData({ id, object: 'text_completion', created, model, choices: [], usage: toOpenAIUsage(usage) }) : ''
      return chunk('', toOpenAIFinishReason(reason)) + usageChunk + SSE_DONE
    },
    error: (err) => renderStreamError(OPENAI_ERRORS, err),
  }
}

export function completionJsonBody(meta: ResponseMeta, text: string, reason: CompletedReason, usage: Usage): object {
  return {
    id: completionId(meta.requestId),
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [{ text, index: 0, logprobs: null, finish_reason: toOpenAIFinishReason(reason) }],
    usage: toOpenAIUsage(usage),
  }
}

export const openAICompletionsCodec: DialectCodec<'openai-completions'> = {
  name: 'openai-completions',
  path: '/v1/completions',
  parse: parseCompletionRequest,
  streamEncoder: completionStreamEncoder,
  jsonBody: completionJsonBody,
  errors: OPENAI_ERRORS,
  limitHeaders: OPENAI_LIMIT_HEADERS,
  contextLengthExceeded: vllmContextLengthExceeded('prompt'),
  streamEnds: OPENAI_STREAM_ENDS,
}
