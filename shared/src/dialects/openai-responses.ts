/**
 * OpenAI's Responses API (`POST /v1/responses`): the `response` object and its event stream.
 * The answer's items are in the order the model wrote them: a `message` item for each run of
 * text (one `output_text` part), a `function_call` item for each call. A stream opens each item
 * as the answer reaches it and closes it with its `.done` events, every event numbered
 * (`sequence_number`); its last event carries the whole response, as the JSON body is.
 */
import { renderStreamError } from '../error-body.ts'
import type { ChoiceOutput, CompletedReason, GenerateRequest, Usage } from '../generation.ts'
import { sseEvent } from '../sse.ts'
import type { DialectCodec, ResponseMeta, StoredConversations, StreamEncoder, StreamMeta } from './codec.ts'
import { OPENAI_ERRORS, vllmContextLengthExceeded } from './openai-errors.ts'
import { OPENAI_LIMIT_HEADERS } from './openai-limit-headers.ts'
import { parseResponsesRequest } from './responses-request.ts'
import type { ErrorShape } from '../error-body.ts'
import type { StoredResponse } from './responses-store.ts'

export function responseId(requestId: string): string {
  return `resp_${requestId}`
}

type OutputItem =
  | { id: string; type: 'message'; status: 'completed' | 'in_progress' | 'incomplete'; role: 'assistant'; content: Array<{ type: 'output_text'; text: string; annotations: []; logprobs: [] }> }
  | { id: string; type: 'function_call'; status: 'completed' | 'in_progress' | 'incomplete'; call_id: string; name: string; arguments: string }

/** Item ids are the response's and the item's place: a continuation names them as the original did. */
const itemId = (meta: ResponseMeta, kind: 'msg' | 'fc', index: number) => `${kind}_${meta.requestId}_${index}`

function usageOf(usage: Usage): object {
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedTokens ?? 0 },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.promptTokens + usage.completionTokens,
  }
}

/** The response object: `output` and the outcome, with the request's settings echoed. */
function responseObject(meta: ResponseMeta, status: 'in_progress' | 'completed' | 'incomplete', output: OutputItem[], usage: Usage | null): object {
  return {
    id: responseId(meta.requestId),
    object: 'response',
    created_at: meta.created,
    status,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    model: meta.model,
    output,
    ...meta.echo,
    usage: usage ? usageOf(usage) : null,
  }
}

const statusOf = (reason: CompletedReason) => (reason === 'length' ? 'incomplete' : 'completed')

export function responsesJsonBody(meta: ResponseMeta, [choice]: ChoiceOutput[], usage: Usage): object {
  const status = statusOf(choice!.reason)
  const output: OutputItem[] = []
  for (const part of choice!.content) {
    const last = output[output.length - 1]
    if (part.type === 'text') {
      if (last?.type === 'message') last.content[0]!.text += part.text
      else output.push({ id: itemId(meta, 'msg', output.length), type: 'message', status, role: 'assistant', content: [{ type: 'output_text', text: part.text, annotations: [], logprobs: [] }] })
    } else output.push({ id: itemId(meta, 'fc', output.length), type: 'function_call', status, call_id: part.call.id, name: part.call.name, arguments: part.call.arguments })
  }
  if (output.length === 0) output.push({ id: itemId(meta, 'msg', 0), type: 'message', status, role: 'assistant', content: [{ type: 'output_text', text: '', annotations: [], logprobs: [] }] })
  // As a stream closes them: every item but the last was complete when the next began.
  for (const item of output.slice(0, -1)) item.status = 'completed'
  return responseObject(meta, status, output, usage)
}

export function responsesStreamEncoder(meta: StreamMeta): StreamEncoder {
  // The preamble's two events (created, in_progress) are numbered 0 and 1 whether or not this
  // encoder sends them: a continuation, which sends no preamble, numbers on from where the
  // original stream was.
  let seq = 2
  const event = (type: string, fields: object, at = seq++) => sseEvent(type, { type, sequence_number: at, ...fields })
  const output: OutputItem[] = []
  /** The item being written, if still open. */
  let open: OutputItem | undefined
  const close = (status: 'completed' | 'incomplete'): string => {
    const item = open
    if (!item) return ''
    open = undefined
    item.status = status
    const at = { item_id: item.id, output_index: output.length - 1 }
    if (item.type === 'message') {
      const part = item.content[0]!
      return event('response.output_text.done', { ...at, content_index: 0, text: part.text, logprobs: [] }) +
        event('response.content_part.done', { ...at, content_index: 0, part }) +
        event('response.output_item.done', { output_index: at.output_index, item })
    }
    return event('response.function_call_arguments.done', { ...at, arguments: item.arguments }) + event('response.output_item.done', { output_index: at.output_index, item })
  }
  const openMessage = (): string => {
    const frames = close('completed')
    const item: OutputItem = { id: itemId(meta, 'msg', output.length), type: 'message', status: 'in_progress', role: 'assistant', content: [] }
    output.push(item)
    open = item
    const part = { type: 'output_text' as const, text: '', annotations: [] as [], logprobs: [] as [] }
    const added = event('response.output_item.added', { output_index: output.length - 1, item: { ...item, content: [] } })
    item.content.push(part)
    return frames + added + event('response.content_part.added', { item_id: item.id, output_index: output.length - 1, content_index: 0, part: { ...part } })
  }
  return {
    start: () => {
      const snapshot = responseObject(meta, 'in_progress', [], null)
      return event('response.created', { response: snapshot }, 0) + event('response.in_progress', { response: snapshot }, 1)
    },
    text: (delta, extra) => {
      let frames = ''
      if (delta !== '') {
        if (open?.type !== 'message') frames += openMessage()
        const message = open as Extract<OutputItem, { type: 'message' }>
        message.content[0]!.text += delta
        frames += event('response.output_text.delta', { item_id: message.id, output_index: output.length - 1, content_index: 0, delta, logprobs: [] })
      }
      for (const call of extra?.toolCalls ?? []) {
        if (call.id !== undefined) {
          frames += close('completed')
          const item: OutputItem = { id: itemId(meta, 'fc', output.length), type: 'function_call', status: 'in_progress', call_id: call.id, name: call.name!, arguments: '' }
          output.push(item)
          open = item
          frames += event('response.output_item.added', { output_index: output.length - 1, item: { ...item } })
        }
        if (call.arguments !== '' && open?.type === 'function_call') {
          open.arguments += call.arguments
          frames += event('response.function_call_arguments.delta', { item_id: open.id, output_index: output.length - 1, delta: call.arguments })
        }
      }
      return frames
    },
    finish: (reason: CompletedReason, usage: Usage) => {
      const status = statusOf(reason)
      let frames = output.length === 0 ? openMessage() : ''
      frames += close(status)
      return frames + event(`response.${status}`, { response: responseObject(meta, status, output, usage) })
    },
    error: (err) => renderStreamError(RESPONSES_ERRORS, err),
  }
}

/**
 * OpenAI's statuses and bodies; mid-stream, an `error` event (`{type: "error", code, message,
 * param}`), which the SDK raises as an APIError.
 */
export const RESPONSES_ERRORS: ErrorShape = {
  ...OPENAI_ERRORS,
  streamFrame: (body) => {
    const { error } = body as { error: { message: string; type: string; param: string | null; code: string | null } }
    return sseEvent('error', { type: 'error', code: error.code ?? error.type, message: error.message, param: error.param })
  },
}

/** Input items the client sent without ids are named by the request and their place (`msg_<request>_in0`). */
const INPUT_ID_PREFIX: Record<string, string> = { message: 'msg', function_call: 'fc', function_call_output: 'fco' }

function storedRecord(gen: GenerateRequest, meta: ResponseMeta, choices: ChoiceOutput[], usage: Usage, previous?: StoredResponse): StoredResponse {
  const own = (gen.stored?.items ?? []).map((item, i) => (item.id ? item : { id: `${INPUT_ID_PREFIX[String(item.type)] ?? 'item'}_${meta.requestId}_in${i}`, ...item }))
  const before = previous ? [...previous.input, ...(previous.response.output as Array<Record<string, unknown>>)] : []
  return { response: responsesJsonBody(meta, choices, usage) as Record<string, unknown>, input: [...before, ...own] }
}

const STORED: StoredConversations = {
  id: responseId,
  parseContinuation: parseResponsesRequest,
  record: storedRecord,
}

export const openAIResponsesCodec: DialectCodec<'openai-responses'> = {
  name: 'openai-responses',
  path: '/v1/responses',
  parse: parseResponsesRequest,
  streamEncoder: responsesStreamEncoder,
  jsonBody: responsesJsonBody,
  toolCallIdPrefix: 'call_',
  errors: RESPONSES_ERRORS,
  limitHeaders: OPENAI_LIMIT_HEADERS,
  contextLengthExceeded: vllmContextLengthExceeded('input'),
  streamEnds: ['event: response.completed', 'event: response.incomplete', 'event: response.failed', 'event: error'],
  stored: STORED,
}
