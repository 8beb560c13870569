/** OpenAI legacy completions (`POST /v1/completions`): request schema, parser, encoders, codec. */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import { renderStreamError } from '../error-body.ts'
import { choiceText, type ChoiceOutput, type CompletedReason, type GenerateRequest, type Usage } from '../generation.ts'
import { SSE_DONE, sseData } from '../sse.ts'
import type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
import { OPENAI_ERRORS, OPENAI_STREAM_ENDS, vllmContextLengthExceeded } from './openai-errors.ts'
import { MAX_COMPLETION_LOGPROBS, nField, OPENAI_UNSUPPORTED, openAIHarmlessFields, priorityField, promptCacheKeyField, streamFields, toCompletionLogprobs, toContextId, toOpenAIFinishReason, toPriority, toOpenAIUsage, toStreamSettings, type OpenAIFinishReason } from './openai-fields.ts'
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
  /** best_of = n is the same as not asking for it (no choice is generated and then dropped). */
  best_of: z.int().min(1).nullish(),
  echo: z.boolean().nullish(),
  /** Fill in the middle: the completion goes between the prompt and this (a model with FIM tokens). */
  suffix: z.string().nullish(),
  /** Alternatives per token, and with them each token's own log probability. */
  logprobs: z.int().min(0).max(MAX_COMPLETION_LOGPROBS).nullish(),
  ...samplingFields,
  ...streamFields,
  ...promptCacheKeyField,
  ...priorityField,
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
  if (req.suffix) {
    if (req.echo) throw new ApiError('invalid_request', "'suffix' cannot be combined with 'echo'.", { param: 'suffix' })
    out.input = { kind: 'text', prompt: out.input.kind === 'text' ? out.input.prompt : '', suffix: req.suffix }
  }
  if (req.ignore_eos) out.ignoreEos = true
  const contextId = toContextId(req)
  if (contextId !== undefined) out.contextId = contextId
  const priority = toPriority(req)
  if (priority !== undefined) out.priority = priority
  const n = req.n ?? 1
  if (req.best_of != null && req.best_of !== n) {
    throw new ApiError('invalid_request', `'best_of' must equal 'n' (${n}): choosing the best of more completions than are returned is not supported.`, { param: 'best_of' })
  }
  if (n > 1) out.n = n
  if (req.logprobs != null) {
    // Prompt tokens' log probabilities would need a pass the engine does not make.
    if (req.echo) throw new ApiError('invalid_request', "'logprobs' cannot be combined with 'echo': prompt log probabilities are not available.", { param: 'logprobs' })
    out.logprobs = { top: req.logprobs }
  }
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
  let open = meta.choices ?? 1
  /** Characters streamed so far per choice: each token's text_offset. */
  const offsets: number[] = []
  const chunk = (index: number, text: string, logprobs: object | null, finishReason: OpenAIFinishReason | null): string => {
    const choices = [{ text, index, logprobs, finish_reason: finishReason }]
    return sseData(meta.includeUsage
      ? { id, object: 'text_completion', created, model, choices, usage: null }
      : { id, object: 'text_completion', created, model, choices })
  }
  return {
    start: () => '',
    text: (delta, extra) => {
      if (delta === '') return ''
      if (!extra) return chunk(0, delta, null, null)
      const choice = extra.choice ?? 0
      const at = offsets[choice] ?? 0
      offsets[choice] = at + delta.length
      return chunk(choice, delta, toCompletionLogprobs(extra.logprobs, at), null)
    },
    finish: (reason: CompletedReason, usage: Usage, _stop?: string, choice = 0) => {
      const last = --open === 0
      const usageChunk = last && meta.includeUsage ? sseData({ id, object: 'text_completion', created, model, choices: [], usage: toOpenAIUsage(usage) }) : ''
      return chunk(choice, '', null, toOpenAIFinishReason(reason)) + usageChunk + (last ? SSE_DONE : '')
    },
    error: (err) => renderStreamError(OPENAI_ERRORS, err),
  }
}

/** The choices' text includes the echoed prompt, as the stream's first delta does (the caller prepends it). */
export function completionJsonBody(meta: ResponseMeta, choices: ChoiceOutput[], usage: Usage): object {
  return {
    id: completionId(meta.requestId),
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: choices.map((c, index) => {
      const text = choiceText(c)
      // The logprobs cover the generated tokens, which end the text (after any echoed prompt).
      const generated = (c.logprobs ?? []).reduce((sum, l) => sum + l.token.length, 0)
      return { text, index, logprobs: toCompletionLogprobs(c.logprobs, text.length - generated), finish_reason: toOpenAIFinishReason(c.reason) }
    }),
    usage: toOpenAIUsage(usage),
  }
}

export const openAICompletionsCodec: DialectCodec<'openai-completions'> = {
  name: 'openai-completions',
  path: '/v1/completions',
  parse: parseCompletionRequest,
  streamEncoder: completionStreamEncoder,
  jsonBody: completionJsonBody,
  toolCallIdPrefix: 'call_',
  errors: OPENAI_ERRORS,
  limitHeaders: OPENAI_LIMIT_HEADERS,
  contextLengthExceeded: vllmContextLengthExceeded('prompt'),
  streamEnds: OPENAI_STREAM_ENDS,
}
