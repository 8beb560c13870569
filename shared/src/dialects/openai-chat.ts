/** OpenAI chat completions (`POST /v1/chat/completions`): request schema, parser, encoders, codec. */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import { renderStreamError } from '../error-body.ts'
import { choiceCalls, choiceText, type ChatMessage, type ChoiceOutput, type CompletedReason, type GenerateRequest, type ToolCallDelta, type Usage } from '../generation.ts'
import { SSE_DONE, sseData } from '../sse.ts'
import type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
import { OPENAI_ERRORS, OPENAI_STREAM_ENDS, vllmContextLengthExceeded } from './openai-errors.ts'
import { MAX_CHAT_TOP_LOGPROBS, nField, OPENAI_UNSUPPORTED, openAIHarmlessFields, priorityField, promptCacheKeyField, streamFields, toChatLogprobs, toContextId, toOpenAIFinishReason, toPriority, toOpenAIUsage, toStreamSettings, type OpenAIFinishReason } from './openai-fields.ts'
import { OPENAI_LIMIT_HEADERS } from './openai-limit-headers.ts'
import { openAIToolFields, OpenAIToolCall, toChatToolCalls, toOpenAIToolUse } from './openai-tools.ts'
import { responseFormatField, toOutputConstraint } from './response-format.ts'
import { checkToolResults } from './tool-checks.ts'
import { maxTokensField, samplingFields, stopField, toSamplingRequest, toStopList } from './sampling-fields.ts'
import { validateBody } from './validate-body.ts'

const TextPart = z.strictObject({
  type: z.literal('text', {
    error: (iss) => `must be "text", got ${JSON.stringify(iss.input)}: only text content parts are supported (no images, audio or files)`,
  }),
  text: z.string(),
})

const ChatMessageBody = z.strictObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool'], {
    error: 'must be "system", "developer", "user", "assistant" or "tool"',
  }),
  /** Absent or null only on an assistant turn that made tool calls. */
  content: z.union([z.string(), z.array(TextPart)]).nullish(),
  tool_calls: z.array(OpenAIToolCall).nullish(),
  tool_call_id: z.string().min(1).nullish(),
})

export const ChatCompletionRequest = z.strictObject({
  model: z.string().min(1),
  messages: z.array(ChatMessageBody).min(1),
  /** Deprecated by OpenAI in favour of max_completion_tokens; both mean generated tokens. */
  max_tokens: maxTokensField.nullish(),
  max_completion_tokens: maxTokensField.nullish(),
  stop: stopField(4),
  n: nField,
  logprobs: z.boolean().nullish(),
  top_logprobs: z.int().min(0).max(MAX_CHAT_TOP_LOGPROBS).nullish(),
  ...openAIToolFields,
  ...responseFormatField,
  ...samplingFields,
  ...streamFields,
  ...promptCacheKeyField,
  ...priorityField,
  ...openAIHarmlessFields,
})
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>

export function parseChatCompletionRequest(body: unknown): GenerateRequest {
  const req = validateBody(ChatCompletionRequest, body, OPENAI_UNSUPPORTED)
  const messages = req.messages.map((m, i) => toChatMessage(m, `messages[${i}]`))
  checkToolResults(messages, (i) => `messages[${i}].tool_call_id`)
  const out: GenerateRequest = {
    dialect: 'openai-chat',
    model: req.model,
    input: { kind: 'chat', messages },
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
  const priority = toPriority(req)
  if (priority !== undefined) out.priority = priority
  const tools = toOpenAIToolUse(req)
  if (tools) out.tools = tools
  const constraint = toOutputConstraint(req.response_format)
  if (constraint) {
    if (tools && tools.choice !== 'none') throw new ApiError('invalid_request', "'response_format' cannot be combined with 'tools' unless 'tool_choice' is \"none\".", { param: 'response_format' })
    out.constraint = constraint
  }
  // A constrained answer ends where its grammar does: generating past EOS has no meaning there.
  if (req.ignore_eos && (constraint || (tools && tools.choice !== 'none'))) {
    throw new ApiError('invalid_request', `'ignore_eos' cannot be combined with '${constraint ? 'response_format' : 'tools'}'.`, { param: 'ignore_eos' })
  }
  if (req.top_logprobs != null && req.logprobs !== true) throw new ApiError('invalid_request', "'top_logprobs' requires 'logprobs' to be true.", { param: 'top_logprobs' })
  if (req.logprobs) out.logprobs = { top: req.top_logprobs ?? 0 }
  if (req.n != null && req.n > 1) out.n = req.n
  return out
}

function toChatMessage(m: z.infer<typeof ChatMessageBody>, at: string): ChatMessage {
  // `developer` is OpenAI's newer name for the system role.
  const role = m.role === 'developer' ? 'system' : m.role
  const calls = m.tool_calls ?? []
  if (calls.length > 0 && role !== 'assistant') throw new ApiError('invalid_request', `'${at}.tool_calls' is only allowed on assistant messages.`, { param: `${at}.tool_calls` })
  if (m.tool_call_id != null && role !== 'tool') throw new ApiError('invalid_request', `'${at}.tool_call_id' is only allowed on tool messages.`, { param: `${at}.tool_call_id` })
  if (role === 'tool' && m.tool_call_id == null) throw new ApiError('invalid_request', `'${at}.tool_call_id' is required on tool messages.`, { param: `${at}.tool_call_id` })
  if (m.content == null && calls.length === 0) throw new ApiError('invalid_request', `'${at}.content' is required.`, { param: `${at}.content` })
  const content = m.content == null ? '' : typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('\n')
  const out: ChatMessage = { role, content }
  if (calls.length > 0) out.tool_calls = toChatToolCalls(calls, `${at}.tool_calls`)
  if (m.tool_call_id != null) out.tool_call_id = m.tool_call_id
  return out
}

export function chatCompletionId(requestId: string): string {
  return `chatcmpl-${requestId}`
}

export function chatStreamEncoder(meta: StreamMeta): StreamEncoder {
  const id = chatCompletionId(meta.requestId)
  // Each chunk is written out as a literal (one per token): on Node 20's V8, `{ ...base, choices }`
  // costs ~1 µs per property added after the spread.
  const { created, model } = meta
  const n = meta.choices ?? 1
  let open = n
  // With include_usage OpenAI sends `usage: null` on every chunk, then one usage chunk.
  const chunk = (index: number, delta: object, logprobs: object | null, finishReason: OpenAIFinishReason | null): string => {
    const choices = [{ index, delta, logprobs, finish_reason: finishReason }]
    return sseData(meta.includeUsage
      ? { id, object: 'chat.completion.chunk', created, model, choices, usage: null }
      : { id, object: 'chat.completion.chunk', created, model, choices })
  }
  return {
    start: () => {
      let frames = ''
      for (let i = 0; i < n; i++) frames += chunk(i, { role: 'assistant', content: '' }, null, null)
      return frames
    },
    text: (delta, extra) => {
      if (!extra) return delta === '' ? '' : chunk(0, { content: delta }, null, null)
      const calls = extra.toolCalls
      if (delta === '' && !calls?.length) return ''
      const body: { content?: string; tool_calls?: object[] } = {}
      if (delta !== '') body.content = delta
      if (calls?.length) body.tool_calls = calls.map(toWireCallDelta)
      return chunk(extra.choice ?? 0, body, toChatLogprobs(extra.logprobs), null)
    },
    finish: (reason: CompletedReason, usage: Usage, _stop?: string, choice = 0) => {
      const last = --open === 0
      const usageChunk = last && meta.includeUsage ? sseData({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: toOpenAIUsage(usage) }) : ''
      return chunk(choice, {}, null, toOpenAIFinishReason(reason)) + usageChunk + (last ? SSE_DONE : '')
    },
    error: (err) => renderStreamError(OPENAI_ERRORS, err),
  }
}

/** A call's piece on the wire: the id, type and name only in its first piece (OpenAI's shape). */
function toWireCallDelta(d: ToolCallDelta): object {
  if (d.id === undefined) return { index: d.index, function: { arguments: d.arguments } }
  return { index: d.index, id: d.id, type: 'function', function: { name: d.name, arguments: d.arguments } }
}

export function chatJsonBody(meta: ResponseMeta, choices: ChoiceOutput[], usage: Usage): object {
  return {
    id: chatCompletionId(meta.requestId),
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    choices: choices.map((c, index) => {
      const calls = choiceCalls(c)
      const text = choiceText(c)
      const message = calls.length === 0
        ? { role: 'assistant', content: text }
        : { role: 'assistant', content: text === '' ? null : text, tool_calls: calls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })) }
      return { index, message, logprobs: toChatLogprobs(c.logprobs), finish_reason: toOpenAIFinishReason(c.reason) }
    }),
    usage: toOpenAIUsage(usage),
  }
}

export const openAIChatCodec: DialectCodec<'openai-chat'> = {
  name: 'openai-chat',
  path: '/v1/chat/completions',
  parse: parseChatCompletionRequest,
  streamEncoder: chatStreamEncoder,
  jsonBody: chatJsonBody,
  toolCallIdPrefix: 'call_',
  errors: OPENAI_ERRORS,
  limitHeaders: OPENAI_LIMIT_HEADERS,
  contextLengthExceeded: vllmContextLengthExceeded('messages'),
  streamEnds: OPENAI_STREAM_ENDS,
}
