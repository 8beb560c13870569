/** OpenAI chat completions (`POST /v1/chat/completions`): request schema, parser, encoders, codec. */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import { renderStreamError } from '../error-body.ts'
import type { ChatMessage, CompletedReason, GenerateRequest, Usage } from '../generation.ts'
import { SSE_DONE, sseData } from '../sse.ts'
import type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
import { OPENAI_ERRORS, OPENAI_STREAM_ENDS, vllmContextLengthExceeded } from './openai-errors.ts'
import { nField, OPENAI_UNSUPPORTED, openAIHarmlessFields, promptCacheKeyField, streamFields, toContextId, toOpenAIFinishReason, toOpenAIUsage, toStreamSettings, type OpenAIFinishReason } from './openai-fields.ts'
import { OPENAI_LIMIT_HEADERS } from './openai-limit-headers.ts'
import { responseFormatField, toOutputConstraint } from './response-format.ts'
import { maxTokensField, samplingFields, stopField, toSamplingRequest, toStopList } from './sampling-fields.ts'
import { validateBody } from './validate-body.ts'

const TextPart = z.strictObject({
  type: z.literal('text', {
    error: (iss) => `must be "text", got ${JSON.stringify(iss.input)}: only text content parts are supported (no images, audio or files)`,
  }),
  text: z.string(),
})

const ChatMessageBody = z.strictObject({
  role: z.enum(['system', 'developer', 'user', 'assistant'], {
    error: 'must be "system", "developer", "user" or "assistant" (tool messages are not supported)',
  }),
  content: z.union([z.string(), z.array(TextPart)]),
})

export const ChatCompletionRequest = z.strictObject({
  model: z.string().min(1),
  messages: z.array(ChatMessageBody).min(1),
  /** Deprecated by OpenAI in favour of max_completion_tokens; both mean generated tokens. */
  max_tokens: maxTokensField.nullish(),
  max_completion_tokens: maxTokensField.nullish(),
  stop: stopField(4),
  n: nField,
  logprobs: z.literal(false, { error: 'must be false: log probabilities are not available' }).nullish(),
  ...responseFormatField,
  ...samplingFields,
  ...streamFields,
  ...promptCacheKeyField,
  ...openAIHarmlessFields,
})
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>

export function parseChatCompletionRequest(body: unknown): GenerateRequest {
  const req = validateBody(ChatCompletionRequest, body, OPENAI_UNSUPPORTED)
  const out: GenerateRequest = {
    dialect: 'openai-chat',
    model: req.model,
    input: { kind: 'chat', messages: req.messages.map(toChatMessage) },
    stop: toStopList(req.stop),
    sampling: toSamplingRequest(req),
    ...toStreamSettings(req),
  }
  // max_completion_tokens wins when both are sent: it is the field OpenAI documents today.
  const maxTokens = req.max_completion_tokens ?? req.max_tokens
  if (maxTokens != null) out.maxTokens = maxTokens
  if (req.ignore_eos) out.ignoreEos = true
  const contextId = toContextId(req)
  if (contextId !== undefined) out.contextId = contextId
  const constraint = toOutputConstraint(req.response_format)
  if (constraint) {
    // A constrained answer ends where its grammar does: generating past EOS has no meaning there.
    if (req.ignore_eos) throw new ApiError('invalid_request', "'ignore_eos' cannot be combined with 'response_format'.", { param: 'ignore_eos' })
    out.constraint = constraint
  }
  return out
}

function toChatMessage(m: z.infer<typeof ChatMessageBody>): ChatMessage {
  // `developer` is OpenAI's newer name for the system role.
  const role = m.role === 'developer' ? 'system' : m.role
  const content = typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('\n')
  return { role, content }
}

export function chatCompletionId(requestId: string): string {
  return `chatcmpl-${requestId}`
}

export function chatStreamEncoder(meta: StreamMeta): StreamEncoder {
  const id = chatCompletionId(meta.requestId)
  // Each chunk is written out as a literal (one per token): on Node 20's V8, `{ ...base, choices }`
  // costs ~1 µs per property added after the spread.
  const { created, model } = meta
  // With include_usage OpenAI sends `usage: null` on every chunk, then one usage chunk.
  const chunk = (delta: object, finishReason: OpenAIFinishReason | null): string => {
    const choices = [{ index: 0, delta, logprobs: null, finish_reason: finishReason }]
    return sseData(meta.includeUsage
      ? { id, object: 'chat.completion.chunk', created, model, choices, usage: null }
      : { id, object: 'chat.completion.chunk', created, model, choices })
  }
  return {
    start: () => chunk({ role: 'assistant', content: '' }, null),
    text: (delta) => (delta === '' ? '' : chunk({ content: delta }, null)),
    finish: (reason: CompletedReason, usage: Usage) => {
      const usageChunk = meta.includeUsage ? sseData({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: toOpenAIUsage(usage) }) : ''
      return chunk({}, toOpenAIFinishReason(reason)) + usageChunk + SSE_DONE
    },
    error: (err) => renderStreamError(OPENAI_ERRORS, err),
  }
}

export function chatJsonBody(meta: ResponseMeta, text: string, reason: CompletedReason, usage: Usage): object {
  return {
    id: chatCompletionId(meta.requestId),
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: toOpenAIFinishReason(reason) }],
    usage: toOpenAIUsage(usage),
  }
}

export const openAIChatCodec: DialectCodec<'openai-chat'> = {
  name: 'openai-chat',
  path: '/v1/chat/completions',
  parse: parseChatCompletionRequest,
  streamEncoder: chatStreamEncoder,
  jsonBody: chatJsonBody,
  errors: OPENAI_ERRORS,
  limitHeaders: OPENAI_LIMIT_HEADERS,
  contextLengthExceeded: vllmContextLengthExceeded('messages'),
  streamEnds: OPENAI_STREAM_ENDS,
}
