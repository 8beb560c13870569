/**
 * OpenAI's Responses API request (`POST /v1/responses`): its schema and its reading as a
 * GenerateRequest. `input` is a string or items (messages with input/output text parts, the
 * model's earlier `function_call`s and their `function_call_output`s); `instructions` is the
 * system turn; function tools in the Responses shape; `text.format` is the structured-output
 * setting. What the server cannot honour (built-in tools, reasoning, background mode, `include`)
 * is a 400 naming the field.
 */
import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import type { ChatMessage, GenerateRequest, ToolChoice } from '../generation.ts'
import { openAIHarmlessFields, priorityField, promptCacheKeyField, toContextId, toPriority } from './openai-fields.ts'
import type { StoredResponse } from './responses-store.ts'
import { responseFormatField, toOutputConstraint } from './response-format.ts'
import { maxTokensField, samplingFields, toSamplingRequest } from './sampling-fields.ts'
import { checkToolResults, MAX_TOOLS, parseArguments, TOOL_NAME, TOOL_NAME_RULE, toToolSpecs, toToolUse } from './tool-checks.ts'
import { validateBody, type UnsupportedFields } from './validate-body.ts'

const name = z.string().regex(TOOL_NAME, { error: TOOL_NAME_RULE })
const text = z.string()

const InputText = z.strictObject({ type: z.literal('input_text'), text })
const OutputText = z.strictObject({ type: z.literal('output_text'), text, annotations: z.array(z.unknown()).optional(), logprobs: z.array(z.unknown()).optional() })
const PARTS = 'must be "input_text" or "output_text": only text content is supported (no images, audio or files)'

const MessageItem = z.strictObject({
  type: z.literal('message').optional(),
  id: z.string().optional(),
  status: z.string().optional(),
  role: z.enum(['user', 'system', 'developer', 'assistant']),
  content: z.union([text, z.array(z.discriminatedUnion('type', [InputText, OutputText], { error: PARTS }))]),
})
const FunctionCallItem = z.strictObject({
  type: z.literal('function_call'),
  id: z.string().optional(),
  status: z.string().optional(),
  call_id: z.string().min(1),
  name,
  arguments: z.string(),
})
const FunctionCallOutputItem = z.strictObject({
  type: z.literal('function_call_output'),
  id: z.string().optional(),
  status: z.string().optional(),
  call_id: z.string().min(1),
  output: z.union([text, z.array(InputText)]),
})
type Item = z.output<typeof MessageItem> | z.output<typeof FunctionCallItem> | z.output<typeof FunctionCallOutputItem>

const ITEMS = 'must be "message", "function_call" or "function_call_output" (other item types are not supported)'
const Item = z.union([MessageItem, FunctionCallItem, FunctionCallOutputItem], { error: ITEMS })

const FunctionTool = z.strictObject({
  type: z.literal('function', { error: 'must be "function": built-in tools (web search, file search, computer use, …) are not available' }),
  name,
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
})

/** `text.format` is `response_format`'s settings, flattened (name and schema beside `type`). */
const TextFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({ type: z.literal('json_schema'), name, description: z.string().optional(), schema: z.record(z.string(), z.unknown()), strict: z.boolean().nullish() }),
])

export const ResponsesRequest = z.strictObject({
  model: z.string().min(1),
  input: z.union([text, z.array(Item).min(1)]),
  instructions: z.string().nullish(),
  max_output_tokens: maxTokensField.nullish(),
  tools: z.array(FunctionTool).max(MAX_TOOLS).nullish(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.strictObject({ type: z.literal('function'), name })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.strictObject({ format: TextFormat.optional(), verbosity: z.literal('medium', { error: 'must be "medium": verbosity is not adjustable' }).nullish() }).nullish(),
  stream: z.boolean().nullish(),
  /** Only `disabled`: the context is never cut to fit. */
  truncation: z.literal('disabled', { error: 'must be "disabled": a context is never truncated to fit' }).nullish(),
  previous_response_id: z.string().min(1).nullish(),
  ...samplingFields,
  ...openAIHarmlessFields,
  ...promptCacheKeyField,
  ...priorityField,
})
export type ResponsesRequest = z.infer<typeof ResponsesRequest>

const UNSUPPORTED: UnsupportedFields = {
  conversation: 'conversation objects are not available; continue a stored response with previous_response_id',
  reasoning: 'reasoning controls are not available',
  background: 'background mode is not available',
  include: 'no extra output can be included',
  top_logprobs: 'log probabilities are not available on this route (use chat completions)',
  prompt: 'stored prompts are not available',
  max_tool_calls: 'a bound on tool calls is not available',
}

/**
 * The body as a GenerateRequest; with `previous`, as the turn after that stored response: its
 * conversation (earlier input, then its output) goes between the instructions and the new input.
 * A body naming a previous response is read without it at the edge: its tool results may answer
 * calls that only the stored conversation holds, so they are checked where that is read (the node).
 */
export function parseResponsesRequest(body: unknown, previous?: StoredResponse): GenerateRequest {
  const req = validateBody(ResponsesRequest, body, UNSUPPORTED)
  const messages: ChatMessage[] = req.instructions ? [{ role: 'system', content: req.instructions }] : []
  const wireOf: string[] = req.instructions ? ['instructions'] : []
  const items: Item[] = typeof req.input === 'string' ? [{ role: 'user', content: req.input }] : req.input
  if (previous) {
    const kept = z.array(Item).safeParse([...previous.input, ...(previous.response.output as unknown[])])
    if (!kept.success) throw new ApiError('internal', 'The stored response could not be read.')
    addItems(kept.data, messages, wireOf, () => 'previous_response_id')
  }
  addItems(items, messages, wireOf, (i) => `input[${i}]`)
  if (!req.previous_response_id || previous) checkToolResults(messages, (i) => wireOf[i]!)
  const out: GenerateRequest = {
    dialect: 'openai-responses',
    model: req.model,
    input: { kind: 'chat', messages },
    stop: [],
    sampling: toSamplingRequest(req),
    stream: req.stream ?? false,
    includeUsage: false,
  }
  if (req.max_output_tokens != null) out.maxTokens = req.max_output_tokens
  const contextId = toContextId(req)
  if (contextId) out.contextId = contextId
  const priority = toPriority(req)
  if (priority !== undefined) out.priority = priority
  out.stored = { store: req.store ?? true, items: items.map(storedItem) }
  if (req.previous_response_id) out.stored.previousId = req.previous_response_id
  const tools = toToolSpecs(req.tools ?? [], (i) => `tools[${i}]`, (i) => `tools[${i}].parameters`)
  const wire = req.tool_choice ?? (tools.length > 0 ? 'auto' : 'none')
  const choice: ToolChoice = typeof wire === 'string' ? wire : { name: wire.name }
  const use = toToolUse(tools, choice, req.parallel_tool_calls ?? true, 'tool_choice')
  if (use) out.tools = use
  const format = req.text?.format
  const constraint = toOutputConstraint(format?.type === 'json_schema' ? { type: 'json_schema', json_schema: { name: format.name, schema: format.schema, strict: format.strict ?? null } } : format, 'text.format.schema')
  if (constraint) {
    if (use && use.choice !== 'none') throw new ApiError('invalid_request', "'text.format' cannot be combined with 'tools' unless 'tool_choice' is \"none\".", { param: 'text.format' })
    out.constraint = constraint
    out.constraintParam = constraint.kind === 'json_schema' ? 'text.format.schema' : 'text.format'
  }
  if (req.ignore_eos) {
    if (constraint || (use && use.choice !== 'none')) throw new ApiError('invalid_request', "'ignore_eos' cannot be combined with 'text.format' or 'tools'.", { param: 'ignore_eos' })
    out.ignoreEos = true
  }
  out.responseEcho = {
    instructions: req.instructions ?? null,
    max_output_tokens: req.max_output_tokens ?? null,
    metadata: req.metadata ?? {},
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    store: req.store ?? true,
    previous_response_id: req.previous_response_id ?? null,
    temperature: req.temperature ?? 1,
    text: { format: format ?? { type: 'text' } },
    tool_choice: wire,
    tools: (req.tools ?? []).map((t) => ({ type: 'function', name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? false })),
    top_p: req.top_p ?? 1,
    truncation: 'disabled',
    user: req.user ?? null,
  }
  return out
}

/** Each item as chat messages, and the wire field of each message made (for the tool-results check). */
function addItems(items: readonly Item[], messages: ChatMessage[], wireOf: string[], at: (i: number) => string): void {
  items.forEach((item, i) => {
    if (item.type === 'function_call') {
      const call = { id: item.call_id, type: 'function' as const, function: { name: item.name, arguments: parseArguments(item.arguments, `${at(i)}.arguments`) } }
      // Calls in a row, and the text just before them, are one assistant turn (as the model made them).
      const last = messages[messages.length - 1]
      if (last?.role === 'assistant') (last.tool_calls ??= []).push(call)
      else {
        messages.push({ role: 'assistant', content: '', tool_calls: [call] })
        wireOf.push(at(i))
      }
      return
    }
    if (item.type === 'function_call_output') {
      messages.push({ role: 'tool', content: partsText(item.output), tool_call_id: item.call_id })
      wireOf.push(`${at(i)}.call_id`)
      return
    }
    messages.push({ role: item.role === 'developer' ? 'system' : item.role, content: partsText(item.content) })
    wireOf.push(at(i))
  })
}

/** An item as the store keeps it: typed, its text in parts (a message's role says which kind). */
function storedItem(item: Item): Record<string, unknown> {
  if (item.type === 'function_call') return { type: 'function_call', ...(item.id ? { id: item.id } : {}), call_id: item.call_id, name: item.name, arguments: item.arguments, status: 'completed' }
  if (item.type === 'function_call_output') return { type: 'function_call_output', ...(item.id ? { id: item.id } : {}), call_id: item.call_id, output: partsText(item.output), status: 'completed' }
  const type = item.role === 'assistant' ? 'output_text' : 'input_text'
  const content = typeof item.content === 'string' ? [{ type, text: item.content }] : item.content.map((p) => ({ type: p.type, text: p.text }))
  return { type: 'message', ...(item.id ? { id: item.id } : {}), role: item.role, content, status: 'completed' }
}

function partsText(content: string | ReadonlyArray<{ text: string }>): string {
  return typeof content === 'string' ? content : content.map((p) => p.text).join('\n')
}
