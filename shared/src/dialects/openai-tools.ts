/**
 * OpenAI's function tools on chat completions: `tools`, `tool_choice`, `parallel_tool_calls`,
 * assistant turns with `tool_calls` and `tool` turns, as the request schema's fields and their
 * conversion to the node's vocabulary (tool-checks.ts checks what zod cannot).
 */
import { z } from 'zod'
import type { ChatToolCall, ToolChoice, ToolUse } from '../generation.ts'
import { MAX_TOOLS, parseArguments, TOOL_NAME, TOOL_NAME_RULE, toToolSpecs, toToolUse } from './tool-checks.ts'

const name = z.string().regex(TOOL_NAME, { error: TOOL_NAME_RULE })

const FunctionTool = z.strictObject({
  type: z.literal('function', { error: 'must be "function": only function tools are supported' }),
  function: z.strictObject({
    name,
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
})

export const openAIToolFields = {
  tools: z.array(FunctionTool).max(MAX_TOOLS).nullish(),
  tool_choice: z
    .union([
      z.enum(['none', 'auto', 'required']),
      z.strictObject({ type: z.literal('function'), function: z.strictObject({ name }) }),
    ])
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
}

/** An assistant turn's call, as the client sends it back. */
export const OpenAIToolCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.strictObject({ name, arguments: z.string() }),
})

type ToolFields = { [K in keyof typeof openAIToolFields]?: z.output<(typeof openAIToolFields)[K]> }

/** The request's tool use (undefined: none offered), checked; OpenAI's defaults: `auto` with tools, parallel calls allowed. */
export function toOpenAIToolUse(req: ToolFields): ToolUse | undefined {
  const tools = toToolSpecs(
    (req.tools ?? []).map((t) => t.function),
    (i) => `tools[${i}].function`,
    (i) => `tools[${i}].function.parameters`,
  )
  const wire = req.tool_choice ?? (tools.length > 0 ? 'auto' : 'none')
  const choice: ToolChoice = typeof wire === 'string' ? wire : { name: wire.function.name }
  return toToolUse(tools, choice, req.parallel_tool_calls ?? true, 'tool_choice')
}

/** An assistant turn's calls as templates receive them: arguments parsed from their JSON text. */
export function toChatToolCalls(calls: ReadonlyArray<z.output<typeof OpenAIToolCall>>, at: string): ChatToolCall[] {
  return calls.map((c, i) => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: parseArguments(c.function.arguments, `${at}[${i}].function.arguments`) } }))
}
