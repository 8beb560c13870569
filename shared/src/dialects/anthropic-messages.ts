/** Anthropic messages (`POST /v1/messages`): request schema, parser, encoders, codec. */

import { z } from 'zod'
import { renderStreamError } from '../error-body.ts'
import type { ChatMessage, CompletedReason, GenerateRequest, Usage } from '../generation.ts'
import { sseEvent } from '../sse.ts'
import { ANTHROPIC_CONTEXT_LENGTH_EXCEEDED, ANTHROPIC_ERRORS, ANTHROPIC_STREAM_ENDS } from './anthropic-errors.ts'
import { ANTHROPIC_LIMIT_HEADERS } from './anthropic-limit-headers.ts'
import type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
import { maxTokensField, samplingFields, toSamplingRequest } from './sampling-fields.ts'
import { validateBody, type UnsupportedFields } from './validate-body.ts'

const TextBlock = z.strictObject({
  type: z.literal('text', {
    error: (iss) => `must be "text", got ${JSON.stringify(iss.input)}: only text content blocks are supported`,
  }),
  text: z.string(),
  /** A prompt-caching hint: the output is the same without caching, so accepting it is harmless. */
  cache_control: z.strictObject({ type: z.literal('ephemeral'), ttl: z.string().optional() }).nullish(),
})

const Content = z.union([z.string(), z.array(TextBlock)])

const Message = z.strictObject({
  role: z.enum(['user', 'assistant'], {
    error: 'must be "user" or "assistant" (put system prompts in the top-level \'system\' field)',
  }),
  content: Content,
})

/** Not an API limit: a bound on the stop checker's per-token work. */
const MAX_STOP_SEQUENCES = 16

export const MessagesRequest = z.strictObject({
  model: z.string().min(1),
  messages: z.array(Message).min(1),
  max_tokens: maxTokensField,
  system: Content.optional(),
  stop_sequences: z.array(z.string().min(1)).max(MAX_STOP_SEQUENCES).nullish(),
  stream: z.boolean().nullish(),
  ...samplingFields,
  /** Anthropic's range is 0..1 (OpenAI's is 0..2). */
  temperature: z.number().min(0).max(1).nullish(),
  /** Harmless: `metadata.user_id` is for abuse tracking, `service_tier` for Anthropic's capacity tiers. */
  metadata: z.strictObject({ user_id: z.string().nullish() }).nullish(),
  service_tier: z.string().nullish(),
})
export type MessagesRequest = z.infer<typeof MessagesRequest>

const TOOLS = 'tool use is not available on this server'

export const ANTHROPIC_UNSUPPORTED: UnsupportedFields = {
  tools: TOOLS,
  tool_choice: TOOLS,
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
  for (const m of req.messages) messages.push({ role: m.role, content: joinText(m.content) })
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
  if (req.ignore_eos) out.ignoreEos = true
  return out
}

function joinText(content: z.infer<typeof Content>): string {
  return typeof content === 'string' ? content : content.map((b) => b.text).join('\n')
}

export function messageId(requestId: string): string {
  return `msg_${requestId}`
}

/** The SDK dispatches on the `event:` line and needs message_start first; output_tokens is cumulative. */
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
  return {
    start: () =>
      sseEvent('message_start', { type: 'message_start', message }) +
      sseEvent('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }) +
      sseEvent('ping', { type: 'ping' }),
    text: (delta) =>
      delta === '' ? '' : sseEvent('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: delta } }),
    finish: (reason: CompletedReason, usage: Usage, stopSequence?: string) =>
      sseEvent('content_block_stop', { type: 'content_block_stop', index: 0 }) +
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

export function messagesJsonBody(meta: ResponseMeta, text: string, reason: CompletedReason, usage: Usage, stopSequence?: string): object {
  return {
    id: messageId(meta.requestId),
    type: 'message',
    role: 'assistant',
    model: meta.model,
    content: [{ type: 'text', text }],
    stop_reason: toAnthropicStopReason(reason),
    stop_sequence: matchedStop(reason, stopSequence),
    usage: { ...toAnthropicInputUsage(usage), output_tokens: usage.completionTokens },
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
  errors: ANTHROPIC_ERRORS,
  limitHeaders: ANTHROPIC_LIMIT_HEADERS,
  contextLengthExceeded: ANTHROPIC_CONTEXT_LENGTH_EXCEEDED,
  streamEnds: ANTHROPIC_STREAM_ENDS,
}

export type AnthropicStopReason = 'end_turn' | 'stop_sequence' | 'max_tokens'

/** A completed sequence's stop_reason. */
export function toAnthropicStopReason(reason: CompletedReason): AnthropicStopReason {
  if (reason === 'length') return 'max_tokens'
  return reason === 'stop_sequence' ? 'stop_sequence' : 'end_turn'
}
