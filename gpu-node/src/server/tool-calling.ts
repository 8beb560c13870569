/**
 * What a request's tools mean for its answer on this node: the constraint its calls are written
 * under (in the model's own call format), and the ids its calls get.
 */
import { createHash } from 'node:crypto'
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import type { OutputConstraint, ToolUse } from '../../../shared/src/generation.ts'
import type { ToolCallFormatName } from '../structured/tool-call-format.ts'

/**
 * The constraint a request's tools put on its answer, in the model's own call format: none when
 * the model may not call (`none`); `auto` lets it write text first; `required` and a named tool
 * constrain from the first token (a named one to that tool alone, one call).
 */
export function toolCalling(tools: ToolUse | undefined, format: ToolCallFormatName): { constraint: OutputConstraint } | undefined {
  if (!tools || tools.choice === 'none') return undefined
  const named = typeof tools.choice === 'object' ? tools.choice.name : undefined
  const offered = named === undefined ? tools.tools : tools.tools.filter((t) => t.name === named)
  return {
    constraint: {
      kind: 'tool_calls',
      format,
      tools: offered.map((t) => ({ name: t.name, schema: t.parameters, strict: t.strict })),
      mode: tools.choice === 'auto' ? 'auto' : 'required',
      parallel: tools.parallel && named === undefined,
    },
  }
}

/** A call's id: fixed by the request, its choice and the call's place, so a continuation names it as the original did. */
export function toolCallId(codec: DialectCodec, requestId: string, choice: number, call: number): string {
  const digest = createHash('sha256').update(`${requestId}\0${choice}\0${call}`).digest('hex').slice(0, 24)
  return `${codec.toolCallIdPrefix}${digest}`
}
