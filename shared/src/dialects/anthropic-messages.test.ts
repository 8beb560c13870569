import { describe, expect, it } from 'vitest'
import { ApiError } from '../api-error.ts'
import type { GenerateRequest } from '../generation.ts'
import { messagesStreamEncoder, parseMessagesRequest } from './anthropic-messages.ts'
import { apiErrorOf } from '../../test/support/api-error-of.ts'

const base = { model: 'tiny', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] }

const rejection = (body: unknown): ApiError => apiErrorOf(() => parseMessagesRequest(body))

describe('parseMessagesRequest', () => {
  it('parses a minimal body with defaults', () => {
    expect(parseMessagesRequest(base)).toEqual<GenerateRequest>({
      dialect: 'anthropic-messages',
      model: 'tiny',
      input: { kind: 'chat', messages: [{ role: 'user', content: 'hi' }] },
      maxTokens: 32,
      stop: [],
      // Only what the body set: the node fills the rest from the model's defaults, then the API's.
      sampling: {},
      stream: false,
      includeUsage: false,
    })
  })

  it('puts the system prompt first and joins text blocks', () => {
    const req = parseMessagesRequest({
      ...base,
      system: [{ type: 'text', text: 'Be brief.' }, { type: 'text', text: 'Be kind.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
        { role: 'assistant', content: 'Sure' },
      ],
    })
    expect(req.input).toEqual({
      kind: 'chat',
      messages: [
        { role: 'system', content: 'Be brief.\nBe kind.' },
        { role: 'user', content: 'a\nb' },
        { role: 'assistant', content: 'Sure' },
      ],
    })
  })

  it('maps stop_sequences, sampling, stream and the harmless fields', () => {
    const req = parseMessagesRequest({
      ...base,
      system: 'S',
      stop_sequences: ['\n\nHuman:'],
      temperature: 0.2,
      top_p: 0.9,
      top_k: 5,
      stream: true,
      metadata: { user_id: 'u-1' },
      service_tier: 'auto',
    })
    expect(req.stop).toEqual(['\n\nHuman:'])
    expect(req.sampling).toMatchObject({ temperature: 0.2, topP: 0.9, topK: 5 })
    expect(req.stream).toBe(true)
    expect(req.includeUsage).toBe(false)
  })

  it('requires max_tokens', () => {
    const err = rejection({ model: 'tiny', messages: base.messages })
    expect(err.param).toBe('max_tokens')
    expect(err.message).toBe("'max_tokens' is required.")
  })

  it("keeps temperature within Anthropic's 0..1", () => {
    expect(rejection({ ...base, temperature: 1.5 }).message).toBe("'temperature' must be at most 1.")
  })

  it('rejects a system role inside messages, pointing at the system field', () => {
    expect(rejection({ ...base, messages: [{ role: 'system', content: 'x' }] }).message).toContain("top-level 'system' field")
  })

  it('rejects image blocks, server tools and thinking as not supported', () => {
    const image = rejection({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } }] }] })
    expect(image.param).toBe('messages[0].content[0].type')
    expect(image.message).toContain('only text and tool blocks are supported (no images or documents)')
    expect(rejection({ ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }).param).toBe('tools[0].type')
    expect(rejection({ ...base, thinking: { type: 'enabled', budget_tokens: 1024 } }).param).toBe('thinking')
  })

  const weather = { name: 'get_weather', description: 'Weather now', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }

  it('takes tools and tool_choice (auto, any, tool, none; disable_parallel_tool_use)', () => {
    expect(parseMessagesRequest({ ...base, tools: [weather] }).tools).toEqual({ tools: [{ name: 'get_weather', description: 'Weather now', parameters: JSON.stringify(weather.input_schema), strict: false }], choice: 'auto', parallel: true })
    expect(parseMessagesRequest({ ...base, tools: [weather], tool_choice: { type: 'any', disable_parallel_tool_use: true } }).tools).toMatchObject({ choice: 'required', parallel: false })
    expect(parseMessagesRequest({ ...base, tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' } }).tools!.choice).toEqual({ name: 'get_weather' })
    expect(parseMessagesRequest({ ...base, tools: [weather], tool_choice: { type: 'none' } }).tools!.choice).toBe('none')
  })

  it('turns tool_use blocks into the assistant\'s calls and tool_result blocks into tool turns', () => {
    const messages = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'text', text: 'Checking.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '21C' }] }, { type: 'text', text: 'And Rome?' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Rome' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', content: 'no data', is_error: true }] },
    ]
    expect(parseMessagesRequest({ ...base, messages, tools: [weather] }).input).toEqual({ kind: 'chat', messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: 'Checking.', tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
      { role: 'tool', content: '21C', tool_call_id: 'toolu_1' },
      { role: 'user', content: 'And Rome?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'toolu_2', type: 'function', function: { name: 'get_weather', arguments: { city: 'Rome' } } }] },
      { role: 'tool', content: 'Error: no data', tool_call_id: 'toolu_2' },
    ] })
  })

  it('names the field of every malformed tool use', () => {
    expect(rejection({ ...base, tools: [{ ...weather, name: 'bad name' }] }).param).toBe('tools[0].name')
    expect(rejection({ ...base, tools: [weather, weather] }).param).toBe('tools[1].name')
    expect(rejection({ ...base, tools: [{ ...weather, input_schema: { type: 'object', properties: { x: { allOf: [] } } } }] }).message).toContain("'tools[0].input_schema.properties.x.allOf' is not supported")
    expect(rejection({ ...base, tools: [weather], tool_choice: { type: 'tool', name: 'nope' } }).param).toBe('tool_choice')
    expect(rejection({ ...base, tool_choice: { type: 'any' } }).message).toBe("'tool_choice' requires a tool call, but the request has no 'tools'.")
    expect(rejection({ ...base, tool_choice: { type: 'sometimes' } }).param).toBe('tool_choice.type')
    expect(rejection({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'x' }] }] }).message).toBe("'messages[0].content[0].tool_use_id' answers the tool call 't', which no earlier assistant turn made.")
    expect(rejection({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] }] }).param).toBe('messages[0].content[0]')
  })

  it('rejects empty messages and unknown fields', () => {
    expect(rejection({ ...base, messages: [] }).message).toBe("'messages' must not be empty.")
    expect(rejection({ ...base, n: 2 }).message).toBe("'n' is not a supported parameter.")
    expect(rejection({ ...base, metadata: { user_id: 'u', team: 'x' } }).param).toBe('metadata.team')
  })
})

describe('messagesStreamEncoder', () => {
  const enc = messagesStreamEncoder({ requestId: 'r1', model: 'tiny', created: 1, promptTokens: 7 })
  const frames = (text: string) =>
    text
      .split('\n\n')
      .filter((f) => f !== '')
      .map((f) => {
        const [eventLine, dataLine] = f.split('\n')
        return { event: eventLine!.replace(/^event: /, ''), data: JSON.parse(dataLine!.replace(/^data: /, '')) as { type: string } & Record<string, any> }
      })

  it('names every frame by its event line, matching the payload type', () => {
    const all = frames(enc.start() + enc.text('a') + enc.finish('stop', { promptTokens: 7, completionTokens: 1 }))
    expect(all.map((f) => f.event)).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ])
    for (const f of all) expect(f.data.type).toBe(f.event)
  })

  it('with tools, opens each block as the answer reaches it: text, then a tool_use with its input in pieces', () => {
    const tools = messagesStreamEncoder({ requestId: 'r1', model: 'tiny', created: 1, promptTokens: 7, tools: true })
    const all = frames(
      tools.start() +
        tools.text('Checking. ') +
        tools.text('', { toolCalls: [{ index: 0, id: 'toolu_1', name: 'get_weather', arguments: '' }] }) +
        tools.text('', { toolCalls: [{ index: 0, arguments: '{"city":' }] }) +
        tools.text('', { toolCalls: [{ index: 0, arguments: '"Paris"}' }] }) +
        tools.finish('tool_calls', { promptTokens: 7, completionTokens: 9 }),
    )
    expect(all.map((f) => [f.event, f.data.index ?? null])).toEqual([
      ['message_start', null], ['ping', null],
      ['content_block_start', 0], ['content_block_delta', 0], ['content_block_stop', 0],
      ['content_block_start', 1], ['content_block_delta', 1], ['content_block_delta', 1], ['content_block_stop', 1],
      ['message_delta', null], ['message_stop', null],
    ])
    expect(all[5]!.data.content_block).toEqual({ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} })
    expect(all[6]!.data.delta).toEqual({ type: 'input_json_delta', partial_json: '{"city":' })
    expect(all[9]!.data.delta.stop_reason).toBe('tool_use')
    // An answer with nothing in it holds one empty text block, as its JSON body does.
    const empty = messagesStreamEncoder({ requestId: 'r2', model: 'tiny', created: 1, promptTokens: 7, tools: true })
    expect(frames(empty.start() + empty.finish('stop', { promptTokens: 7, completionTokens: 0 })).map((f) => f.event)).toEqual(['message_start', 'ping', 'content_block_start', 'content_block_stop', 'message_delta', 'message_stop'])
  })

  it('reports input tokens in message_start and cumulative output tokens in message_delta', () => {
    const [start] = frames(enc.start())
    expect(start!.data).toMatchObject({ message: { usage: { input_tokens: 7, output_tokens: 0 }, stop_reason: null, stop_sequence: null } })
    const delta = frames(enc.finish('stop_sequence', { promptTokens: 7, completionTokens: 9 }, 'END')).find((f) => f.event === 'message_delta')
    expect(delta!.data).toEqual({ type: 'message_delta', delta: { stop_reason: 'stop_sequence', stop_sequence: 'END' }, usage: { input_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 9 } })
  })

  it('writes errors as an error event', () => {
    expect(enc.error(new ApiError('overloaded', 'busy'))).toBe(
      'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n',
    )
  })
})
