import { describe, expect, it } from 'vitest'
import { ApiError } from '../api-error.ts'
import { resolveSampling, type GenerateRequest } from '../generation.ts'
import { chatStreamEncoder, parseChatCompletionRequest } from './openai-chat.ts'
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

  it('rejects n > 1 with a clear message', () => {
    const err = rejection({ ...base, n: 2 })
    expect(err.param).toBe('n')
    expect(err.message).toContain('n > 1 is not supported; send separate requests')
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

  it('rejects tools, tool messages and tool calls as not supported', () => {
    expect(rejection({ ...base, tools: [{ type: 'function', function: { name: 'f' } }] }).message).toBe(
      "'tools' is not supported: tool and function calling are not available on this server.",
    )
    expect(rejection({ model: 'tiny', messages: [{ role: 'tool', content: 'x', tool_call_id: 'c1' }] }).param).toBe('messages[0].tool_call_id')
    expect(rejection({ model: 'tiny', messages: [{ role: 'assistant', content: null, tool_calls: [] }] }).param).toBe('messages[0].tool_calls')
    expect(rejection({ model: 'tiny', messages: [{ role: 'tool', content: 'x' }] }).message).toContain('tool messages are not supported')
  })

  it('rejects logprobs', () => {
    expect(rejection({ ...base, logprobs: true }).param).toBe('logprobs')
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
