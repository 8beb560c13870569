/**
 * What Anthropic messages carry besides their settings: content blocks (text, tool_use,
 * tool_result), tools and tool_choice, and their conversion to the node's chat turns and tool
 * use (tool-checks.ts checks what zod cannot).
 */
import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import type { ChatMessage, ChatToolCall, ToolChoice, ToolUse } from '../generation.ts'
import { TOOL_NAME, TOOL_NAME_RULE, toToolSpecs, toToolUse } from './tool-checks.ts'

export const TextBlock = z.strictObject({
  type: z.literal('text'),
  text: z.string(),
  /** A prompt-caching hint: the output is the same without caching, so accepting it is harmless. */
  cache_control: z.strictObject({ type: z.literal('ephemeral'), ttl: z.string().optional() }).nullish(),
})

const ToolUseBlock = z.strictObject({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().regex(TOOL_NAME, { error: TOOL_NAME_RULE }),
  input: z.record(z.string(), z.unknown()),
  cache_control: TextBlock.shape.cache_control,
})

const ToolResultBlock = z.strictObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(TextBlock)]).optional(),
  is_error: z.boolean().nullish(),
  cache_control: TextBlock.shape.cache_control,
})

const BLOCK_TYPES = 'must be "text", "tool_use" or "tool_result": only text and tool blocks are supported (no images or documents)'
const Block = z.discriminatedUnion('type', [TextBlock, ToolUseBlock, ToolResultBlock], { error: BLOCK_TYPES })
type Block = z.infer<typeof Block>

const Content = z.union([z.string(), z.array(Block)])
export const SystemContent = z.union([z.string(), z.array(TextBlock)])

export const Message = z.strictObject({
  role: z.enum(['user', 'assistant'], {
    error: 'must be "user" or "assistant" (put system prompts in the top-level \'system\' field)',
  }),
  content: Content,
})

export const Tool = z.strictObject({
  /** Only client tools: Anthropic's server tools (web search, code execution) carry their own type. */
  type: z.literal('custom', { error: 'must be "custom" or absent: server tools are not available' }).optional(),
  name: z.string().regex(TOOL_NAME, { error: TOOL_NAME_RULE }),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown()),
  cache_control: TextBlock.shape.cache_control,
})

const parallel = { disable_parallel_tool_use: z.boolean().optional() }
export const AnthropicToolChoice = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('auto'), ...parallel }),
  z.strictObject({ type: z.literal('any'), ...parallel }),
  z.strictObject({ type: z.literal('tool'), name: z.string(), ...parallel }),
  z.strictObject({ type: z.literal('none') }),
])

/** Anthropic's defaults: `auto` when there are tools, parallel calls allowed. */
export function toAnthropicToolUse(req: { tools?: Array<z.output<typeof Tool>>; tool_choice?: z.output<typeof AnthropicToolChoice> }): ToolUse | undefined {
  const tools = toToolSpecs(
    (req.tools ?? []).map((t) => ({ name: t.name, description: t.description, parameters: t.input_schema })),
    (i) => `tools[${i}]`,
    (i) => `tools[${i}].input_schema`,
  )
  const wire = req.tool_choice ?? { type: 'auto' as const }
  const choice: ToolChoice = wire.type === 'any' ? 'required' : wire.type === 'tool' ? { name: wire.name } : wire.type
  const parallel = wire.type === 'none' || wire.disable_parallel_tool_use !== true
  return toToolUse(tools, choice, parallel, 'tool_choice')
}

/**
 * One wire message as chat turns, in transformers' shape: an assistant's tool_use blocks become
 * its tool_calls; a user's tool_result blocks become `tool` turns (before its text, as clients
 * put them first).
 */
export function toChatTurns(m: z.infer<typeof Message>, at: string): Array<{ message: ChatMessage; at: string }> {
  if (typeof m.content === 'string') return [{ message: { role: m.role, content: m.content }, at }]
  const blocks = m.content
  const text = joinText(blocks.filter((b): b is Extract<Block, { type: 'text' }> => b.type === 'text'))
  const turns: Array<{ message: ChatMessage; at: string }> = []
  const calls: ChatToolCall[] = []
  blocks.forEach((b, j) => {
    const where = `${at}.content[${j}]`
    if (b.type === 'tool_use') {
      if (m.role !== 'assistant') throw new ApiError('invalid_request', `'${where}' is a tool_use block, which only assistant messages may hold.`, { param: where })
      calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: b.input } })
    } else if (b.type === 'tool_result') {
      if (m.role !== 'user') throw new ApiError('invalid_request', `'${where}' is a tool_result block, which only user messages may hold.`, { param: where })
      const content = b.content === undefined ? '' : joinText(b.content)
      turns.push({ message: { role: 'tool', content: b.is_error ? `Error: ${content}` : content, tool_call_id: b.tool_use_id }, at: `${where}.tool_use_id` })
    }
  })
  if (calls.length > 0) turns.push({ message: { role: 'assistant', content: text, tool_calls: calls }, at })
  else if (text !== '' || turns.length === 0) turns.push({ message: { role: m.role, content: text }, at })
  return turns
}

export function joinText(content: string | ReadonlyArray<{ text: string }>): string {
  return typeof content === 'string' ? content : content.map((b) => b.text).join('\n')
}
