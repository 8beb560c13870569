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

  it('rejects image and tool blocks as not supported', () => {
    const image = rejection({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } }] }] })
    expect(image.param).toBe('messages[0].content[0].type')
    expect(image.message).toContain('got "image": only text content blocks are supported')
    const toolResult = rejection({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'x' }] }] })
    expect(toolResult.message).toContain('"tool_result"')
  })

  it('rejects tools and thinking as not supported', () => {
    expect(rejection({ ...base, tools: [] }).message).toBe("'tools' is not supported: tool use is not available on this server.")
    expect(rejection({ ...base, thinking: { type: 'enabled', budget_tokens: 1024 } }).param).toBe('thinking')
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
        return { event: eventLine!.replace(/^event: /, ''), data: JSON.parse(dataLine!.replace(/^data: /, '')) as { type: string } }
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
