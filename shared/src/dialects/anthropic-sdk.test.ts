/**
 * Conformance of the Anthropic encoders and error bodies through the official
 * `@anthropic-ai/sdk`, unmodified, served through its `fetch` option in small chunks.
 */

import { textChoice } from '../generation.ts'
import Anthropic from '@anthropic-ai/sdk'
import { describe, expect, it } from 'vitest'
import { ApiError, INTERNAL_ERROR_MESSAGE } from '../api-error.ts'
import { renderError } from '../error-body.ts'
import { SSE_HEADERS, SSE_KEEP_ALIVE } from '../sse.ts'
import { getDialect, type StreamMeta } from './index.ts'

const meta: StreamMeta = { requestId: 'req-1', model: 'tiny', created: 1_700_000_000, promptTokens: 5 }
// Of the 5 prompt tokens, 2 were read from the prefix cache and 1 written to it: input_tokens is the other 2.
const usage = { promptTokens: 5, completionTokens: 3, cachedTokens: 2, cacheCreationTokens: 1 }
const TEXT_PARTS = ['Hé', 'llo ', '👋']
const messages = getDialect('anthropic-messages')
const params = { model: 'tiny', max_tokens: 16, messages: [{ role: 'user' as const, content: 'hi' }] }

function clientFor(respond: () => Response, maxRetries = 0): Anthropic {
  return new Anthropic({ apiKey: 'x', baseURL: 'http://127.0.0.1:1', maxRetries, fetch: async () => respond() })
}

/** An SSE response whose body arrives in 7-byte pieces. */
function sseResponse(text: string): Response {
  const bytes = new TextEncoder().encode(text)
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < bytes.length; i += 7) controller.enqueue(bytes.slice(i, i + 7))
      controller.close()
    },
  })
  return new Response(body, { headers: SSE_HEADERS })
}

function jsonResponse(body: object, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } })
}

function messageStream(reason: 'stop' | 'length' | 'stop_sequence' = 'stop', stopSequence?: string): string {
  const enc = messages.streamEncoder(meta)
  return enc.start() + SSE_KEEP_ALIVE + TEXT_PARTS.map((t) => enc.text(t)).join('') + enc.finish(reason, usage, stopSequence)
}

describe('Anthropic streaming through the official SDK', () => {
  it('delivers the events in the documented order', async () => {
    const client = clientFor(() => sseResponse(messageStream()))
    const events = []
    for await (const event of await client.messages.create({ ...params, stream: true })) events.push(event)
    expect(events.map((e) => e.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ])
    const start = events[0] as Anthropic.RawMessageStartEvent
    expect(start.message).toMatchObject({ id: 'msg_req-1', role: 'assistant', model: 'tiny', content: [], usage: { input_tokens: 5 } })
    const delta = events[6] as Anthropic.RawMessageDeltaEvent
    expect(delta.delta.stop_reason).toBe('end_turn')
    expect(delta.usage.output_tokens).toBe(3)
  })

  it('assembles the final message with the stream helper', async () => {
    const client = clientFor(() => sseResponse(messageStream('length')))
    const final = await client.messages.stream(params).finalMessage()
    expect(final.content).toEqual([{ type: 'text', text: 'Héllo 👋' }])
    expect(final.stop_reason).toBe('max_tokens')
    expect(final.stop_sequence).toBeNull()
    expect(final.usage).toMatchObject({ input_tokens: 2, output_tokens: 3, cache_read_input_tokens: 2, cache_creation_input_tokens: 1 })
    expect(final.usage.cache_read_input_tokens).toBe(2)
  })

  it('reports the matched stop sequence', async () => {
    const client = clientFor(() => sseResponse(messageStream('stop_sequence', '\n\n')))
    const final = await client.messages.stream(params).finalMessage()
    expect(final.stop_reason).toBe('stop_sequence')
    expect(final.stop_sequence).toBe('\n\n')
  })

  it('turns a mid-stream error event into an APIError of the right type', async () => {
    const enc = messages.streamEncoder(meta)
    const body = enc.start() + enc.text('partial') + enc.error(new ApiError('overloaded', 'The node is overloaded.'))
    const client = clientFor(() => sseResponse(body))
    const err = await client.messages.stream(params).finalMessage().then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.APIError)
    expect((err as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error')
    expect((err as Error).message).toContain('The node is overloaded.')
  })

  it('never leaks an unknown error mid-stream', async () => {
    const enc = messages.streamEncoder(meta)
    const client = clientFor(() => sseResponse(enc.start() + enc.error(new TypeError('cannot read x of undefined'))))
    const err = (await client.messages.stream(params).finalMessage().catch((e: unknown) => e)) as InstanceType<typeof Anthropic.APIError>
    expect(err.type).toBe('api_error')
    expect(err.message).toContain(INTERNAL_ERROR_MESSAGE)
    expect(err.message).not.toContain('undefined')
  })
})

describe('Anthropic non-streaming body through the official SDK', () => {
  it('parses a message', async () => {
    const client = clientFor(() => jsonResponse(messages.jsonBody(meta, [textChoice('Hello', 'stop')], usage)))
    const res = await client.messages.create(params)
    expect(res).toEqual({
      id: 'msg_req-1',
      type: 'message',
      role: 'assistant',
      model: 'tiny',
      content: [{ type: 'text', text: 'Hello' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 2, output_tokens: 3, cache_read_input_tokens: 2, cache_creation_input_tokens: 1 },
    })
  })
})

describe('Anthropic error bodies through the official SDK', () => {
  const cases = [
    [new ApiError('invalid_request', "'max_tokens' is required.", { param: 'max_tokens' }), 400, Anthropic.BadRequestError, 'invalid_request_error'],
    [new ApiError('unauthorized', 'Invalid API key.'), 401, Anthropic.AuthenticationError, 'authentication_error'],
    [new ApiError('forbidden', 'This key may not use this model.'), 403, Anthropic.PermissionDeniedError, 'permission_error'],
    [new ApiError('model_not_found', "The model 'nope' does not exist."), 404, Anthropic.NotFoundError, 'not_found_error'],
    [new ApiError('request_too_large', 'The body exceeds 1 MiB.'), 413, Anthropic.ContentTooLargeError, 'request_too_large'],
    [new ApiError('rate_limited', 'Rate limit reached.', { retryAfterMs: 1500 }), 429, Anthropic.RateLimitError, 'rate_limit_error'],
    [new ApiError('overloaded', 'Overloaded.', { retryAfterMs: 200 }), 529, Anthropic.OverloadedError, 'overloaded_error'],
    [new ApiError('upstream_unavailable', 'No GPU node is reachable.'), 502, Anthropic.InternalServerError, 'api_error'],
    [new ApiError('timeout', 'The request timed out.'), 504, Anthropic.GatewayTimeoutError, 'timeout_error'],
    [new ApiError('internal', INTERNAL_ERROR_MESSAGE), 500, Anthropic.InternalServerError, 'api_error'],
  ] as const

  for (const [apiError, status, ErrorClass, type] of cases) {
    it(`renders ${apiError.code} as ${status} ${type} and the SDK raises ${ErrorClass.name}`, async () => {
      const r = renderError(messages.errors, apiError)
      expect(r.status).toBe(status)
      const client = clientFor(() => jsonResponse(r.body, r.status, r.headers))
      const err = await client.messages.create(params).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(ErrorClass)
      const apiErr = err as InstanceType<typeof Anthropic.APIError>
      expect(apiErr.status).toBe(status)
      expect(apiErr.type).toBe(type)
      expect(apiErr.message).toContain(apiError.message)
    })
  }

  it('counts 529 overloaded as an InternalServerError, as Anthropic clients expect', async () => {
    const r = renderError(messages.errors, new ApiError('overloaded', 'Overloaded.'))
    const err = await clientFor(() => jsonResponse(r.body, r.status, r.headers)).messages.create(params).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.InternalServerError)
  })

  it('lets the SDK retry an overload after retry-after-ms and then succeed', async () => {
    const overloaded = renderError(messages.errors, new ApiError('overloaded', 'busy', { retryAfterMs: 1 }))
    let calls = 0
    const client = clientFor(() => {
      calls += 1
      return calls === 1 ? jsonResponse(overloaded.body, overloaded.status, overloaded.headers) : jsonResponse(messages.jsonBody(meta, [textChoice('ok', 'stop')], usage))
    }, 1)
    const res = await client.messages.create(params)
    expect(res.content).toEqual([{ type: 'text', text: 'ok' }])
    expect(calls).toBe(2)
  })
})
