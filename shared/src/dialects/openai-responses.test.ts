import { describe, expect, it } from 'vitest'
import { parseResponsesRequest } from './responses-request.ts'
import { openAIResponsesCodec, responsesJsonBody, responsesStreamEncoder } from './openai-responses.ts'

const meta = { requestId: 'r1', model: 'tiny', created: 1, promptTokens: 3 }
const events = (frames: string) =>
  frames.split('\n\n').filter((f) => f !== '').map((f) => {
    const [eventLine, dataLine] = f.split('\n')
    return { event: eventLine!.slice(7), data: JSON.parse(dataLine!.slice(6)) as Record<string, any> }
  })

describe('parseResponsesRequest', () => {
  it('reads items as chat turns: instructions first, calls in a row as one assistant turn, outputs as tool turns', () => {
    const parsed = parseResponsesRequest({
      model: 'tiny',
      instructions: 'Be brief.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris and Rome?' }] },
        { type: 'function_call', call_id: 'c1', name: 'w', arguments: '{"city":"Paris"}' },
        { type: 'function_call', call_id: 'c2', name: 'w', arguments: '{"city":"Rome"}' },
        { type: 'function_call_output', call_id: 'c1', output: '21C' },
        { type: 'function_call_output', call_id: 'c2', output: [{ type: 'input_text', text: '25C' }] },
      ],
      max_output_tokens: 9,
      text: { format: { type: 'json_object' } },
    })
    expect(parsed.input).toEqual({ kind: 'chat', messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris and Rome?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'w', arguments: { city: 'Paris' } } }, { id: 'c2', type: 'function', function: { name: 'w', arguments: { city: 'Rome' } } }] },
      { role: 'tool', content: '21C', tool_call_id: 'c1' },
      { role: 'tool', content: '25C', tool_call_id: 'c2' },
    ] })
    expect(parsed).toMatchObject({ maxTokens: 9, constraint: { kind: 'json_object' }, responseEcho: { max_output_tokens: 9, instructions: 'Be brief.', store: true, previous_response_id: null } })
    expect(parsed.stored).toEqual({ store: true, items: [
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris and Rome?' }], status: 'completed' },
      { type: 'function_call', call_id: 'c1', name: 'w', arguments: '{"city":"Paris"}', status: 'completed' },
      { type: 'function_call', call_id: 'c2', name: 'w', arguments: '{"city":"Rome"}', status: 'completed' },
      { type: 'function_call_output', call_id: 'c1', output: '21C', status: 'completed' },
      { type: 'function_call_output', call_id: 'c2', output: '25C', status: 'completed' },
    ] })
  })

  it('a continuation: the stored conversation goes between the instructions and the new input; its tool results are checked only with it', () => {
    const body = { model: 'tiny', instructions: 'Be brief.', previous_response_id: 'resp_r1', input: [{ type: 'function_call_output', call_id: 'call_1', output: '21C' }] }
    // At the edge (no stored conversation yet) the result may answer a call only the store holds.
    expect(parseResponsesRequest(body).stored).toMatchObject({ store: true, previousId: 'resp_r1' })
    expect(() => parseResponsesRequest({ ...body, previous_response_id: undefined })).toThrow(/no earlier assistant turn/)
    const first = parseResponsesRequest({ model: 'tiny', input: 'Weather in Paris?', store: true })
    const previous = openAIResponsesCodec.stored!.record(first, meta, [{ content: [{ type: 'text', text: 'Checking.' }, { type: 'tool_call', call: { id: 'call_1', name: 'w', arguments: '{"city":"Paris"}' } }], reason: 'tool_calls' }], { promptTokens: 3, completionTokens: 5 })
    expect(previous.input).toEqual([{ id: 'msg_r1_in0', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }], status: 'completed' }])
    const next = openAIResponsesCodec.stored!.parseContinuation(body, previous)
    expect(next.input).toEqual({ kind: 'chat', messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: 'Checking.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'w', arguments: { city: 'Paris' } } }] },
      { role: 'tool', content: '21C', tool_call_id: 'call_1' },
    ] })
    expect(next.responseEcho).toMatchObject({ previous_response_id: 'resp_r1' })
    const record = openAIResponsesCodec.stored!.record(next, { ...meta, requestId: 'r2', echo: next.responseEcho! }, [{ content: [{ type: 'text', text: 'Warm.' }], reason: 'stop' }], { promptTokens: 9, completionTokens: 2 }, previous)
    // The whole conversation before the answer: the chain's input and output, then this request's input.
    expect(record.input.map((item) => item.id)).toEqual(['msg_r1_in0', 'msg_r1_0', 'fc_r1_1', 'fco_r2_in0'])
    expect(record.response).toMatchObject({ id: 'resp_r2', previous_response_id: 'resp_r1', output: [{ type: 'message', content: [{ text: 'Warm.' }] }] })
  })
})

describe('responses stream and body', () => {
  it('opens items as the answer reaches them, numbers every event, and ends with the whole response (the JSON body)', () => {
    const enc = responsesStreamEncoder(meta)
    const frames = enc.start() + enc.text('Checking.') + enc.text('', { toolCalls: [{ index: 0, id: 'call_1', name: 'w', arguments: '{"c":' }] }) + enc.text('', { toolCalls: [{ index: 0, arguments: '1}' }] }) +
      enc.finish('tool_calls', { promptTokens: 3, completionTokens: 5 })
    const all = events(frames)
    expect(all.map((e) => e.event)).toEqual([
      'response.created', 'response.in_progress',
      'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
      'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done',
      'response.completed',
    ])
    for (const e of all) expect(e.data.type).toBe(e.event)
    expect(all.map((e) => e.data.sequence_number)).toEqual(all.map((_, i) => i))
    const body = responsesJsonBody(meta, [{ content: [{ type: 'text', text: 'Checking.' }, { type: 'tool_call', call: { id: 'call_1', name: 'w', arguments: '{"c":1}' } }], reason: 'tool_calls' }], { promptTokens: 3, completionTokens: 5 })
    expect(all[all.length - 1]!.data.response).toEqual(body)
  })

  it('a continuation (no preamble) numbers on from the preamble', () => {
    const enc = responsesStreamEncoder(meta)
    expect(events(enc.text('a'))[0]!.data.sequence_number).toBe(2)
  })

  it('max_output_tokens reached: incomplete, with its reason', () => {
    const enc = responsesStreamEncoder(meta)
    const last = events(enc.text('a') + enc.finish('length', { promptTokens: 3, completionTokens: 1 })).at(-1)!
    expect(last.event).toBe('response.incomplete')
    expect(last.data.response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } })
  })

  it('an incomplete answer: the body closes its items as the stream did (only the last one is incomplete)', () => {
    const enc = responsesStreamEncoder(meta)
    const usage = { promptTokens: 3, completionTokens: 4 }
    const frames = enc.start() + enc.text('a') + enc.text('', { toolCalls: [{ index: 0, id: 'call_1', name: 'w', arguments: '{"c":' }] }) + enc.finish('length', usage)
    const body = responsesJsonBody(meta, [{ content: [{ type: 'text', text: 'a' }, { type: 'tool_call', call: { id: 'call_1', name: 'w', arguments: '{"c":' } }], reason: 'length' }], usage)
    expect(events(frames).at(-1)!.data.response).toEqual(body)
    expect((body as { output: Array<{ status: string }> }).output.map((item) => item.status)).toEqual(['completed', 'incomplete'])
  })
})
