/**
 * How a model family writes a tool call, as vLLM's `--tool-call-parser` names them: the text that
 * starts a call (the trigger an `auto` answer may write at any point), the text around one call's
 * arguments, and how the parser reads it back (tool-call-parser.ts). One description serves the
 * grammar that constrains the calls (grammars.ts) and the parser that reads them, so the two
 * cannot disagree.
 */

export interface ToolCallFormat {
  readonly name: ToolCallFormatName
  /** Text that begins every call: in `auto` mode, the model's choice to call is writing it. */
  readonly trigger: string
  /** A call to `name` up to its arguments' JSON. */
  begin(name: string): string
  /** What closes a call after its arguments. */
  readonly end: string
  /** A call's head as the parser reads it (any whitespace the model puts), capturing the name; matched at the trigger. */
  readonly head: RegExp
  /** What goes between two calls when the grammar writes them back to back (`required`, a named tool). */
  readonly separator: string
  /** Text between or after calls that is not content (a separator, whitespace). */
  readonly between: RegExp
}

export const TOOL_CALL_FORMATS = ['hermes', 'llama3_json'] as const
export type ToolCallFormatName = (typeof TOOL_CALL_FORMATS)[number]

/** `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`: Hermes 2 Pro, Qwen2.5 and Qwen3, and our ChatML fallback. */
const HERMES: ToolCallFormat = {
  name: 'hermes',
  trigger: '<tool_call>',
  begin: (name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `,
  end: '}\n</tool_call>',
  head: /^<tool_call>\s*\{\s*"name"\s*:\s*"([a-zA-Z0-9_-]{1,64})"\s*,\s*"arguments"\s*:\s*/,
  separator: '\n',
  between: /^\s*$/,
}

/** `{"name": …, "parameters": {…}}`, calls separated by `; `: Llama 3.1–3.3's JSON tool calling. */
const LLAMA3_JSON: ToolCallFormat = {
  name: 'llama3_json',
  trigger: '{"name": ',
  begin: (name) => `{"name": ${JSON.stringify(name)}, "parameters": `,
  end: '}',
  head: /^\{"name": "([a-zA-Z0-9_-]{1,64})"\s*,\s*"(?:parameters|arguments)"\s*:\s*/,
  separator: '; ',
  between: /^\s*;?\s*$/,
}

export function toolCallFormat(name: ToolCallFormatName): ToolCallFormat {
  return name === 'hermes' ? HERMES : LLAMA3_JSON
}

/**
 * The format a chat template teaches its model: Hermes when it writes `<tool_call>` tags, Llama 3
 * JSON when it asks for `"parameters"` objects (or speaks `<|python_tag|>`); Hermes otherwise,
 * as the ChatML fallback renders tools.
 */
export function detectToolCallFormat(templateText: string): ToolCallFormatName {
  if (templateText.includes('<tool_call>')) return 'hermes'
  if (templateText.includes('<|python_tag|>') || /"parameters": (dictionary|dict)/.test(templateText)) return 'llama3_json'
  return 'hermes'
}
