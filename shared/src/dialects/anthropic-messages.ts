/** Anthropic messages (`POST /v1/messages`): request schema, parser, encoders, codec. */

import { z } from 'zod'
import { renderStreamError } from '../error-body.ts'
import { ApiError } from '../api-error.ts'
import type { ChatMessage, ChoiceOutput, CompletedReason, GenerateRequest, Usage } from '../generation.ts'
import { sseEvent } from '../sse.ts'
import { ANTHROPIC_CONTEXT_LENGTH_EXCEEDED, ANTHROPIC_ERRORS, ANTHROPIC_STREAM_ENDS } from './anthropic-errors.ts'
import { ANTHROPIC_LIMIT_HEADERS } from './anthropic-limit-headers.ts'
import type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
import { maxTokensField, samplingFields, toSamplingRequest } from './sampling-fields.ts'
import { AnthropicToolChoice, joinText, Message, SystemContent, toAnthropicToolUse, toChatTurns, Tool } from './anthropic-content.ts'
import { checkToolResults, MAX_TOOLS } from './tool-checks.ts'
import { validateBody, type UnsupportedFields } from './validate-body.ts'

/** Not an API limit: a bound on the stop checker's per-token work. */
const MAX_STOP_SEQUENCES = 16

export const MessagesRequest = z.strictObject({
  model: z.string().min(1),
  messages: z.array(Message).min(1),
  max_tokens: maxTokensField,
  system: SystemContent.optional(),
  stop_sequences: z.array(z.string().min(1)).max(MAX_STOP_SEQUENCES).nullish(),
  stream: z.boolean().nullish(),
  tools: z.array(Tool).max(MAX_TOOLS).optional(),
  tool_choice: AnthropicToolChoice.optional(),
  ...samplingFields,
  /** Anthropic's range is 0..1 (OpenAI's is 0..2). */
  temperature: z.number().min(0).max(1).nullish(),
  /** Harmless: `metadata.user_id` is for abuse tracking, `service_tier` for Anthropic's capacity tiers. */
  metadata: z.strictObject({ user_id: z.string().nullish() }).nullish(),
  service_tier: z.string().nullish(),
})
export type MessagesRequest = z.infer<typeof MessagesRequest>

export const ANTHROPIC_UNSUPPORTED: UnsupportedFields = {
  thinking: 'extended thinking is not available',
  mcp_servers: 'MCP servers are not available',
  container: 'containers are not available',
  context_management: 'context management is not available',
  source: 'only text content is supported (no images or documents)',
}

export function parseMessagesRequest(body: unknown): GenerateRequest {
  const req = validateBody(MessagesRequest, body, ANTHROPIC_UNSUPPORTED)
  const messages: ChatMessage[] = []
  const system = req.system === undefined ? '' : joinText(req.system)
  if (system !== '') messages.push({ role: 'system', content: system })
  // Where each message of the wire landed among `messages` (tool results become turns of their own).
  const wireOf: string[] = system !== '' ? [''] : []
  req.messages.forEach((m, i) => {
    for (const turn of toChatTurns(m, `messages[${i}]`)) {
      messages.push(turn.message)
      wireOf.push(turn.at)
    }
  })
  checkToolResults(messages, (i) => wireOf[i]!)
  const out: GenerateRequest = {
    dialect: 'anthropic-messages',
    model: req.model,
    input: { kind: 'chat', messages },
    maxTokens: req.max_tokens,
    stop: req.stop_sequences ?? [],
    sampling: toSamplingRequest(req),
    stream: req.stream ?? false,
    includeUsage: false,
  }
  const tools = toAnthropicToolUse(req)
  if (tools) out.tools = tools
  if (req.ignore_eos) {
    if (tools && tools.choice !== 'none') throw new ApiError('invalid_request', "'ignore_eos' cannot be combined with 'tools'.", { param: 'ignore_eos' })
    out.ignoreEos = true
  }
  return out
}

export function messageId(requestId: string): string {
  return `msg_${requestId}`
}

/**
 * The SDK dispatches on the `event:` line and needs message_start first; output_tokens is
 * cumulative. Without tools the text block opens with the preamble, as Anthropic's does; with
 * tools, blocks open as the answer reaches them (text, then each tool_use), so a stream holds
 * exactly the blocks its JSON body would. An answer with neither holds one empty text block, as
 * the body does.
 */
export function messagesStreamEncoder(meta: StreamMeta): StreamEncoder {
  const message = {
    id: messageId(meta.requestId),
    type: 'message',
    role: 'assistant',
    content: [],
    model: meta.model,
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: meta.promptTokens, output_tokens: 0 },
  }
  const eager = !meta.tools
  /** The open block's index and kind; index -1: none opened yet. A continuation starts in the same state, without the preamble. */
  let index = eager ? 0 : -1
  let open: 'text' | 'tool_use' | undefined = eager ? 'text' : undefined
  const close = () => (open === undefined ? '' : ((open = undefined), sseEvent('content_block_stop', { type: 'content_block_stop', index })))
  const begin = (kind: 'text' | 'tool_use', block: object) => {
    const frames = close() + sseEvent('content_block_start', { type: 'content_block_start', index: ++index, content_block: block })
    open = kind
    return frames
  }
  const text = (delta: string) =>
    (open === 'text' ? '' : begin('text', { type: 'text', text: '' })) + sseEvent('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: delta } })
  return {
    start: () =>
      sseEvent('message_start', { type: 'message_start', message }) +
      (eager ? sseEvent('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }) : '') +
      sseEvent('ping', { type: 'ping' }),
    text: (delta, extra) => {
      let frames = delta === '' ? '' : text(delta)
      for (const call of extra?.toolCalls ?? []) {
        if (call.id !== undefined) frames += begin('tool_use', { type: 'tool_use', id: call.id, name: call.name, input: {} })
        if (call.arguments !== '') frames += sseEvent('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: call.arguments } })
      }
      return frames
    },
    finish: (reason: CompletedReason, usage: Usage, stopSequence?: string) =>
      (index === -1 ? begin('text', { type: 'text', text: '' }) : '') +
      close() +
      sseEvent('message_delta', {
        type: 'message_delta',
        delta: { stop_reason: toAnthropicStopReason(reason), stop_sequence: matchedStop(reason, stopSequence) },
        // Cumulative whole-message totals: the SDK's stream snapshot takes the input and cache counts from here.
        usage: { ...toAnthropicInputUsage(usage), output_tokens: usage.completionTokens },
      }) +
      sseEvent('message_stop', { type: 'message_stop' }),
    error: (err) => renderStreamError(ANTHROPIC_ERRORS, err),
  }
}

export function messagesJsonBody(meta: ResponseMeta, [choice]: ChoiceOutput[], usage: Usage): object {
  const { reason, stopSequence } = choice!
  const content: object[] = []
  let text: { type: 'text'; text: string } | undefined
  for (const part of choice!.content) {
    if (part.type === 'text') {
      if (text) text.text += part.text
      else content.push((text = { type: 'text', text: part.text }))
      continue
    }
    text = undefined
    content.push({ type: 'tool_use', id: part.call.id, name: part.call.name, input: toolInput(part.call.arguments) })
  }
  if (content.length === 0) content.push({ type: 'text', text: '' })
  return {
    id: messageId(meta.requestId),
    type: 'message',
    role: 'assistant',
    model: meta.model,
    content,
    stop_reason: toAnthropicStopReason(reason),
    stop_sequence: matchedStop(reason, stopSequence),
    usage: { ...toAnthropicInputUsage(usage), output_tokens: usage.completionTokens },
  }
}

/** A call's input object; a call cut short by max_tokens keeps what parses ({} when nothing does), as the SDK's stream does. */
function toolInput(args: string): unknown {
  try {
    return JSON.parse(args)
  } catch {
    return {}
  }
}

/**
 * Anthropic's arithmetic: the prompt is input_tokens + cache_creation_input_tokens +
 * cache_read_input_tokens, so input_tokens counts only what was neither read from nor written
 * to the prefix cache.
 */
export function toAnthropicInputUsage(usage: Usage): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number } {
  const read = usage.cachedTokens ?? 0
  const created = usage.cacheCreationTokens ?? 0
  return { input_tokens: usage.promptTokens - read - created, cache_creation_input_tokens: created, cache_read_input_tokens: read }
}

function matchedStop(reason: CompletedReason, stopSequence: string | undefined): string | null {
  return reason === 'stop_sequence' ? (stopSequence ?? null) : null
}

export const anthropicMessagesCodec: DialectCodec<'anthropic-messages'> = {
  name: 'anthropic-messages',
  path: '/v1/messages',
  parse: parseMessagesRequest,
  streamEncoder: messagesStreamEncoder,
  jsonBody: messagesJsonBody,
  toolCallIdPrefix: 'toolu_',
  errors: ANTHROPIC_ERRORS,
  limitHeaders: ANTHROPIC_LIMIT_HEADERS,
  contextLengthExceeded: ANTHROPIC_CONTEXT_LENGTH_EXCEEDED,
  streamEnds: ANTHROPIC_STREAM_ENDS,
}

export type AnthropicStopReason = 'end_turn' | 'stop_sequence' | 'max_tokens' | 'tool_use'

/** A completed sequence's stop_reason. */
export function toAnthropicStopReason(reason: CompletedReason): AnthropicStopReason {
  if (reason === 'length') return 'max_tokens'
  if (reason === 'tool_calls') return 'tool_use'
  return reason === 'stop_sequence' ? 'stop_sequence' : 'end_turn'
}
