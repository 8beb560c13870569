/**
 * A finished SSE body as a client sees it, checked against the strict shape of its dialect: one
 * preamble (one role chunk; one message_start and content_block_start), content, one ending
 * ([DONE] / message_stop last), and no error event; and its text, for comparing runs.
 */
import type { SseFrame } from '../../node/sse-client.ts'

export type StreamPath = '/v1/chat/completions' | '/v1/completions' | '/v1/messages'

export interface StreamVerdict {
  text: string
  errors: number
  /** The dialect's shape problems (empty: strict). */
  problems: string[]
  /** The final usage's completion tokens. */
  completionTokens?: number
}

export function judgeStream(path: StreamPath, frames: readonly SseFrame[]): StreamVerdict {
  const problems: string[] = []
  const errors = frames.filter((f) => f.event === 'error' || f.data.startsWith('{"error"')).length
  const json = frames.filter((f) => f.data !== '' && f.data !== '[DONE]' && !f.data.startsWith('{"error"')).map((f) => ({ event: f.event, j: JSON.parse(f.data) }))
  let text = ''
  let completionTokens: number | undefined
  if (path === '/v1/messages') {
    const names = frames.map((f) => f.event)
    if (names[0] !== 'message_start') problems.push('message_start is not first')
    if (names.filter((n) => n === 'message_start').length !== 1) problems.push('not one message_start')
    if (names.filter((n) => n === 'content_block_start').length !== 1) problems.push('not one content_block_start')
    if (names.at(-1) !== 'message_stop') problems.push('message_stop is not last')
    for (const { j } of json) {
      if (j.type === 'content_block_delta') text += j.delta.text
      if (j.type === 'message_delta') completionTokens = j.usage.output_tokens
    }
  } else {
    if (frames.at(-1)?.data !== '[DONE]') problems.push('[DONE] is not last')
    if (frames.filter((f) => f.data === '[DONE]').length !== 1) problems.push('not one [DONE]')
    if (path === '/v1/chat/completions') {
      const roles = json.filter(({ j }) => j.choices?.[0]?.delta?.role !== undefined).length
      if (roles !== 1 || json[0]?.j.choices?.[0]?.delta?.role !== 'assistant') problems.push('not one role chunk, first')
    }
    if (json.filter(({ j }) => j.choices?.[0]?.finish_reason).length !== 1) problems.push('not one finish_reason')
    for (const { j } of json) {
      text += (path === '/v1/completions' ? j.choices?.[0]?.text : j.choices?.[0]?.delta?.content) ?? ''
      if (j.usage) completionTokens = j.usage.completion_tokens
    }
    const ids = new Set(json.map(({ j }) => j.id))
    if (ids.size !== 1) problems.push(`${ids.size} response ids`)
  }
  return { text, errors, problems, ...(completionTokens !== undefined ? { completionTokens } : {}) }
}
