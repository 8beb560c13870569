import { describe, expect, it } from 'vitest'
import { ApiError } from '../api-error.ts'
import { resolveSampling, type GenerateRequest } from '../generation.ts'
import { chatJsonBody, chatStreamEncoder, parseChatCompletionRequest } from './openai-chat.ts'
import { apiErrorOf } from '../../test/support/api-error-of.ts'

const user = { role: 'user', content: 'hi' }
const base = { model: 'tiny', messages: [user] }

/** The ApiError a body is rejected with. */
const rejection = (body: unknown): ApiError => apiErrorOf(() => parseChatCompletionRequest(body))

describe('parseChatCompletionRequest', () => {
  it('fills OpenAI defaults for a minimal body', () => {
    expect(parseChatCompletionRequest(base)).toEqual<GenerateRequest>({
      dialect: 'openai-chat',
      model: 'tiny',
      input: { kind: 'chat', messages: [{ role: 'user', content: 'hi' }] },
      stop: [],
      // Only what the body set: the node fills the rest from the model's defaults, then the API's.
      sampling: {},
      stream: false,
      includeUsage: false,
    })
  })

  it('maps every sampling field, including the vLLM extensions', () => {
    const req = parseChatCompletionRequest({
      ...base,
      temperature: 0,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.05,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      repetition_penalty: 1.1,
      seed: 42,
      max_completion_tokens: 64,
      stop: ['\n\n', 'END'],
      ignore_eos: true,
    })
    expect(req.sampling).toEqual({ temperature: 0, topP: 0.9, topK: 40, minP: 0.05, presencePenalty: 0.5, frequencyPenalty: -0.5, repetitionPenalty: 1.1, seed: 42 })
    expect(req.maxTokens).toBe(64)
    expect(req.stop).toEqual(['\n\n', 'END'])
    expect(req.ignoreEos).toBe(true)
  })

  it('treats null as "use the default", as OpenAI does', () => {
    const req = parseChatCompletionRequest({ ...base, temperature: null, top_p: null, stop: null, max_tokens: null, n: null, seed: null })
    expect(req.sampling).toEqual({})
    expect(resolveSampling(req.sampling).temperature).toBe(1)
    expect(req.maxTokens).toBeUndefined()
  })

  it('accepts top_k -1 as vLLM spells "off"', () => {
    expect(parseChatCompletionRequest({ ...base, top_k: -1 }).sampling.topK).toBe(0)
  })

  it('prefers max_completion_tokens over the deprecated max_tokens', () => {
    expect(parseChatCompletionRequest({ ...base, max_tokens: 10 }).maxTokens).toBe(10)
    expect(parseChatCompletionRequest({ ...base, max_tokens: 10, max_completion_tokens: 20 }).maxTokens).toBe(20)
  })

  it('accepts a single stop string', () => {
    expect(parseChatCompletionRequest({ ...base, stop: 'END' }).stop).toEqual(['END'])
  })

  it('reads stream and include_usage', () => {
    const req = parseChatCompletionRequest({ ...base, stream: true, stream_options: { include_usage: true } })
    expect(req.stream).toBe(true)
    expect(req.includeUsage).toBe(true)
  })

  it('maps developer to system and joins text parts', () => {
    const req = parseChatCompletionRequest({
      model: 'tiny',
      messages: [
        { role: 'developer', content: 'Be brief.' },
        { role: 'system', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
        { role: 'assistant', content: 'hello' },
      ],
    })
    expect(req.input).toEqual({
      kind: 'chat',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'system', content: 'a\nb' },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello' },
      ],
    })
  })

  it('accepts the documented harmless fields', () => {
    const req = parseChatCompletionRequest({
      ...base,
      user: 'u-1',
      store: false,
      metadata: { team: 'a' },
      service_tier: 'auto',
      parallel_tool_calls: false,
      logprobs: false,
      n: 1,
    })
    expect(req.model).toBe('tiny')
  })

  it('reads prompt_cache_key as the context id (absent, null or empty: none)', () => {
    expect(parseChatCompletionRequest({ ...base, prompt_cache_key: 'conv-42' }).contextId).toBe('conv-42')
    for (const body of [base, { ...base, prompt_cache_key: null }, { ...base, prompt_cache_key: '' }]) {
      expect('contextId' in parseChatCompletionRequest(body)).toBe(false)
    }
    expect(rejection({ ...base, prompt_cache_key: 42 }).param).toBe('prompt_cache_key')
  })

  it('rejects an unknown field by name', () => {
    const err = rejection({ ...base, temprature: 0.5 })
    expect(err.code).toBe('invalid_request')
    expect(err.param).toBe('temprature')
    expect(err.message).toBe("'temprature' is not a supported parameter.")
  })

  it('takes n from 1 to 8', () => {
    expect(parseChatCompletionRequest({ ...base, n: 1 }).n).toBeUndefined()
    expect(parseChatCompletionRequest({ ...base, n: 8 }).n).toBe(8)
    expect(rejection({ ...base, n: 9 }).message).toBe("'n' must be at most 8.")
    expect(rejection({ ...base, n: 0 }).param).toBe('n')
  })

  it('rejects an empty or missing messages list', () => {
    expect(rejection({ model: 'tiny', messages: [] }).message).toBe("'messages' must not be empty.")
    expect(rejection({ model: 'tiny' }).message).toBe("'messages' is required.")
  })

  it('rejects a missing model', () => {
    expect(rejection({ messages: [user] }).param).toBe('model')
  })

  it('names the path and the expected type for wrong types', () => {
    expect(rejection({ ...base, temperature: 'hot' }).message).toBe("'temperature' must be a number, got string.")
    expect(rejection({ model: 'tiny', messages: [{ role: 'user', content: 5 }] }).message).toBe(
      "'messages[0].content' must be a string or an array, got 5.",
    )
    expect(rejection({ model: 'tiny', messages: [{ role: 'user', content: [{ type: 'text', text: 3 }] }] }).param).toBe('messages[0].content[0].text')
    expect(rejection({ ...base, seed: 1.5 }).message).toBe("'seed' must be an integer, got 1.5.")
  })

  it('enforces the sampling ranges', () => {
    expect(rejection({ ...base, temperature: 2.5 }).message).toBe("'temperature' must be at most 2.")
    expect(rejection({ ...base, top_p: 0 }).message).toBe("'top_p' must be greater than 0.")
    expect(rejection({ ...base, presence_penalty: -3 }).param).toBe('presence_penalty')
    expect(rejection({ ...base, repetition_penalty: 0 }).param).toBe('repetition_penalty')
    expect(rejection({ ...base, max_tokens: 0 }).message).toBe("'max_tokens' must be at least 1.")
  })

  it('limits stop to four non-empty strings', () => {
    expect(rejection({ ...base, stop: ['a', 'b', 'c', 'd', 'e'] }).message).toBe("'stop' must have at most 4 items.")
    expect(rejection({ ...base, stop: ['a', ''] }).message).toBe("'stop[1]' must not be empty.")
    expect(rejection({ ...base, stop: '' }).message).toBe("'stop' must not be empty.")
  })

  it('rejects image parts as not supported', () => {
    const err = rejection({ model: 'tiny', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }] })
    expect(err.param).toBe('messages[0].content[0].type')
    expect(err.message).toContain('only text content parts are supported')
  })

  const weather = { type: 'function', function: { name: 'get_weather', description: 'Weather now', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }

  it('takes tools, tool_choice and parallel_tool_calls, auto by default', () => {
    const parsed = parseChatCompletionRequest({ ...base, tools: [weather] })
    expect(parsed.tools).toEqual({ tools: [{ name: 'get_weather', description: 'Weather now', parameters: JSON.stringify(weather.function.parameters), strict: false }], choice: 'auto', parallel: true })
    expect(parseChatCompletionRequest({ ...base, tools: [weather], tool_choice: 'required', parallel_tool_calls: false }).tools).toMatchObject({ choice: 'required', parallel: false })
    expect(parseChatCompletionRequest({ ...base, tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } } }).tools!.choice).toEqual({ name: 'get_weather' })
    // No parameters: a function of no arguments, as OpenAI reads it.
    expect(parseChatCompletionRequest({ ...base, tools: [{ type: 'function', function: { name: 'now' } }] }).tools!.tools[0]!.parameters).toBe('{"type":"object","properties":{}}')
    expect(parseChatCompletionRequest({ ...base, tool_choice: 'none' }).tools).toBeUndefined()
  })

  it('takes assistant tool calls and tool messages that answer them, in the template\'s shape', () => {
    const messages = [
      user,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', content: [{ type: 'text', text: '21C' }], tool_call_id: 'call_1' },
    ]
    expect(parseChatCompletionRequest({ model: 'tiny', messages, tools: [weather] }).input).toEqual({ kind: 'chat', messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
      { role: 'tool', content: '21C', tool_call_id: 'call_1' },
    ] })
  })

  it('names the field of every malformed tool use', () => {
    const bad = (extra: object) => rejection({ ...base, ...extra })
    expect(bad({ tools: [{ type: 'function', function: { name: 'has space' } }] }).param).toBe('tools[0].function.name')
    const big = (name: string) => ({ type: 'function', function: { name, parameters: { type: 'object', description: 'x'.repeat(30_000) } } })
    expect(bad({ tools: [big('a'), big('b'), big('c')] }).message).toContain("'tools' holds more than 65536 bytes of schemas (at tools[2].function)")
    expect(bad({ tools: [weather, weather] }).message).toBe("'tools[1].function.name' repeats the tool name 'get_weather': tool names must be unique.")
    expect(bad({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { n: { type: 'number', multipleOf: 2 } } } } }] }).message).toContain("'tools[0].function.parameters.properties.n.multipleOf' is not supported")
    expect(bad({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'wat' } } }] }).param).toBe('tools[0].function.parameters')
    expect(bad({ tools: [{ type: 'code_interpreter' }] }).param).toBe('tools[0].type')
    expect(bad({ tools: [weather], tool_choice: { type: 'function', function: { name: 'other' } } }).message).toBe("'tool_choice' names the tool 'other', which is not in 'tools'.")
    expect(bad({ tool_choice: 'required' }).message).toBe("'tool_choice' requires a tool call, but the request has no 'tools'.")
    expect(bad({ tools: [weather], tool_choice: 'sometimes' }).param).toBe('tool_choice')
    expect(bad({ tools: [weather], response_format: { type: 'json_object' } }).param).toBe('response_format')
    expect(bad({ tools: [weather], ignore_eos: true }).param).toBe('ignore_eos')
    expect(bad({ functions: [] }).message).toContain("use 'tools' and 'tool_choice'")
    expect(rejection({ model: 'tiny', messages: [user, { role: 'tool', content: 'x', tool_call_id: 'c1' }] }).message).toBe("'messages[1].tool_call_id' answers the tool call 'c1', which no earlier assistant turn made.")
    expect(rejection({ model: 'tiny', messages: [{ role: 'tool', content: 'x' }] }).message).toBe("'messages[0].tool_call_id' is required on tool messages.")
    expect(rejection({ model: 'tiny', messages: [{ role: 'user', content: 'x', tool_call_id: 'c' }] }).param).toBe('messages[0].tool_call_id')
    expect(rejection({ model: 'tiny', messages: [{ role: 'assistant', content: null }] }).param).toBe('messages[0].content')
    expect(rejection({ model: 'tiny', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{' } }] }] }).param).toBe('messages[0].tool_calls[0].function.arguments')
  })

  it('takes logprobs with top_logprobs from 0 to 20', () => {
    expect(parseChatCompletionRequest({ ...base, logprobs: true }).logprobs).toEqual({ top: 0 })
    expect(parseChatCompletionRequest({ ...base, logprobs: true, top_logprobs: 20 }).logprobs).toEqual({ top: 20 })
    expect(parseChatCompletionRequest({ ...base, logprobs: false }).logprobs).toBeUndefined()
    expect(rejection({ ...base, logprobs: true, top_logprobs: 21 }).message).toBe("'top_logprobs' must be at most 20.")
    expect(rejection({ ...base, top_logprobs: 2 }).message).toBe("'top_logprobs' requires 'logprobs' to be true.")
  })

  it('takes response_format as the output constraint', () => {
    expect(parseChatCompletionRequest({ ...base, response_format: { type: 'text' } }).constraint).toBeUndefined()
    expect(parseChatCompletionRequest({ ...base, response_format: { type: 'json_object' } }).constraint).toEqual({ kind: 'json_object' })
    const schema = { type: 'object', properties: { a: { type: 'integer', minimum: 0 } }, required: ['a'], additionalProperties: false }
    expect(parseChatCompletionRequest({ ...base, response_format: { type: 'json_schema', json_schema: { name: 'a_1', schema, strict: true } } }).constraint).toEqual({ kind: 'json_schema', schema: JSON.stringify(schema) })
    expect(rejection({ ...base, response_format: { type: 'json_schema', json_schema: { name: 'has space' } } }).param).toBe('response_format.json_schema.name')
    expect(rejection({ ...base, response_format: { type: 'xml' } }).param).toBe('response_format.type')
    expect(rejection({ ...base, response_format: { type: 'json_object' }, ignore_eos: true }).param).toBe('ignore_eos')
  })

  it('rejects stream_options without stream', () => {
    expect(rejection({ ...base, stream_options: { include_usage: true } }).param).toBe('stream_options')
  })

  it('rejects a body that is not an object', () => {
    for (const body of [null, [], 'hi', 3]) expect(rejection(body).message).toBe('The request body must be a JSON object.')
  })
})

describe('chatStreamEncoder', () => {
  const meta = { requestId: 'r1', model: 'tiny', created: 1, promptTokens: 2 }

  it('writes exactly the documented frames', () => {
    const enc = chatStreamEncoder(meta)
    const head = { id: 'chatcmpl-r1', object: 'chat.completion.chunk', created: 1, model: 'tiny' }
    expect(enc.start()).toBe(`data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] })}\n\n`)
    expect(enc.text('')).toBe('')
    expect(enc.finish('stop_sequence', { promptTokens: 2, completionTokens: 1 })).toBe(
      `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`,
    )
  })

  it('keeps newlines inside one data line', () => {
    const frame = chatStreamEncoder(meta).text('a\nb\r\n')
    expect(frame.split('\n').filter((l) => l !== '')).toHaveLength(1)
  })
})

describe('chat tool calls, logprobs and n on the wire', () => {
  const meta = { requestId: 'r', model: 'tiny', created: 1, promptTokens: 3 }
  const data = (frames: string) => frames.split('\n\n').filter((f) => f.startsWith('data: {')).map((f) => JSON.parse(f.slice(6)))

  it('streams a call\'s id, type and name in its first delta and only arguments after', () => {
    const enc = chatStreamEncoder(meta)
    const [first] = data(enc.text('', { toolCalls: [{ index: 0, id: 'call_1', name: 'f', arguments: '{"a"' }] }))
    expect(first.choices[0].delta).toEqual({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a"' } }] })
    const [next] = data(enc.text('', { toolCalls: [{ index: 0, arguments: ':1}' }] }))
    expect(next.choices[0].delta).toEqual({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] })
    const [end] = data(enc.finish('tool_calls', { promptTokens: 3, completionTokens: 4 }))
    expect(end.choices[0].finish_reason).toBe('tool_calls')
  })

  it('a JSON body with calls has content null, the calls, and finish_reason tool_calls', () => {
    const body = chatJsonBody(meta, [{ content: [{ type: 'tool_call', call: { id: 'call_1', name: 'f', arguments: '{}' } }], reason: 'tool_calls' }], { promptTokens: 3, completionTokens: 4 }) as { choices: Array<{ message: object; finish_reason: string }> }
    expect(body.choices[0]).toMatchObject({ message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] }, finish_reason: 'tool_calls' })
  })

  it('n choices: a role chunk each, chunks under their index, the closing frames after the last finish only', () => {
    const enc = chatStreamEncoder({ ...meta, choices: 2, includeUsage: true })
    expect(data(enc.start()).map((c) => c.choices[0].index)).toEqual([0, 1])
    expect(data(enc.text('x', { choice: 1 }))[0].choices[0]).toMatchObject({ index: 1, delta: { content: 'x' } })
    const first = enc.finish('length', { promptTokens: 3, completionTokens: 2 }, undefined, 1)
    expect(first).not.toContain('[DONE]')
    const last = enc.finish('stop', { promptTokens: 3, completionTokens: 5 }, undefined, 0)
    expect(last.endsWith('data: [DONE]\n\n')).toBe(true)
    expect(data(last).at(-1).usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 5 })
  })
})
