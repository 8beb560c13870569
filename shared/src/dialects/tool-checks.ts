/**
 * What both dialects check about tools before a request reaches a node: names a model can write
 * and a client can match (`^[a-zA-Z0-9_-]{1,64}$`, unique), parameters the grammar engine can
 * enforce exactly, a choice that names a tool the request has, and tool results that answer a
 * call made earlier in the conversation.
 */
import { ApiError } from '../api-error.ts'
import type { ChatMessage, ToolChoice, ToolSpec, ToolUse } from '../generation.ts'
import { MAX_SCHEMA_BYTES, schemaText } from './response-format.ts'

export { NAME as TOOL_NAME, NAME_RULE as TOOL_NAME_RULE } from './response-format.ts'
/** Tools one request may offer: each is compiled into the grammar of its calls. */
export const MAX_TOOLS = 128
/** All of a request's tool schemas together, serialized: one grammar is compiled from them all, so its compile time is bounded as one schema's is. */
export const MAX_TOOL_SCHEMA_BYTES = 2 * MAX_SCHEMA_BYTES

/** A function that takes no arguments, when a tool gives no schema (OpenAI's reading of an absent `parameters`). */
const NO_PARAMETERS = { type: 'object', properties: {} }

export interface ToolInput {
  name: string
  description?: string | null
  parameters?: Record<string, unknown> | null
  strict?: boolean | null
}

/**
 * The request's tools, checked: `at(i)` is the wire path of tool i (for errors), `schemaAt(i)` of its schema.
 * Throws a 400 naming the field for a duplicate name or a schema the engine cannot enforce.
 */
export function toToolSpecs(tools: readonly ToolInput[], at: (i: number) => string, schemaAt: (i: number) => string): ToolSpec[] {
  const seen = new Set<string>()
  let bytes = 0
  return tools.map((t, i) => {
    if (seen.has(t.name)) throw new ApiError('invalid_request', `'${at(i)}.name' repeats the tool name '${t.name}': tool names must be unique.`, { param: `${at(i)}.name` })
    seen.add(t.name)
    const spec: ToolSpec = { name: t.name, parameters: schemaText(t.parameters ?? NO_PARAMETERS, schemaAt(i)), strict: t.strict === true }
    bytes += spec.parameters.length
    if (bytes > MAX_TOOL_SCHEMA_BYTES) throw new ApiError('invalid_request', `'tools' holds more than ${MAX_TOOL_SCHEMA_BYTES} bytes of schemas (at ${at(i)}); offer fewer or smaller tools.`, { param: 'tools' })
    if (t.description) spec.description = t.description
    return spec
  })
}

/** The tool use a request asks for: its choice checked against its tools (`param` names the choice's field). */
export function toToolUse(tools: ToolSpec[], choice: ToolChoice, parallel: boolean, param: string): ToolUse | undefined {
  if (choice === 'required' && tools.length === 0) throw new ApiError('invalid_request', `'${param}' requires a tool call, but the request has no 'tools'.`, { param })
  if (typeof choice === 'object' && !tools.some((t) => t.name === choice.name)) {
    throw new ApiError('invalid_request', `'${param}' names the tool '${choice.name}', which is not in 'tools'.`, { param })
  }
  if (tools.length === 0) return undefined
  return { tools, choice, parallel }
}

/**
 * Every tool result answers a call an earlier assistant turn made (by id): a result for a call
 * that was never made is a client's bookkeeping error, and the model would be shown nonsense.
 */
export function checkToolResults(messages: readonly ChatMessage[], at: (message: number) => string): void {
  const called = new Set<string>()
  messages.forEach((m, i) => {
    for (const call of m.tool_calls ?? []) called.add(call.id)
    if (m.role === 'tool' && !called.has(m.tool_call_id!)) {
      throw new ApiError('invalid_request', `'${at(i)}' answers the tool call '${m.tool_call_id}', which no earlier assistant turn made.`, { param: at(i) })
    }
  })
}

/** Arguments JSON as a template receives them (parsed), or a 400 naming the field when it is not JSON. */
export function parseArguments(text: string, param: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    throw new ApiError('invalid_request', `'${param}' must be a JSON text.`, { param })
  }
}
