/**
 * Conformance of the OpenAI encoders and error bodies through the official `openai` SDK,
 * unmodified: our bytes are served through its `fetch` option, split into small chunks so
 * frames and multi-byte characters straddle reads the way they do on a real socket.
 */

import { textChoice } from '../generation.ts'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { ApiError, INTERNAL_ERROR_MESSAGE } from '../api-error.ts'
import { renderError } from '../error-body.ts'
import { SSE_HEADERS, SSE_KEEP_ALIVE } from '../sse.ts'
import { getDialect, type StreamMeta } from './index.ts'

const meta: StreamMeta = { requestId: 'req-1', model: 'tiny', created: 1_700_000_000, promptTokens: 5, includeUsage: false }
// 2 of the 5 prompt tokens came from the prefix cache.
const usage = { promptTokens: 5, completionTokens: 3, cachedTokens: 2, cacheCreationTokens: 1 }
const TEXT_PARTS = ['Hé', 'llo ', '👋']
const chat = getDialect('openai-chat')
const completions = getDialect('openai-completions')

/** A client whose every request is answered by `respond`. */
function clientFor(respond: () => Response, maxRetries = 0): OpenAI {
  return new OpenAI({ apiKey: 'x', baseURL: 'http://127.0.0.1:1/v1', maxRetries, fetch: async () => respond() })
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

function chatStream(m: StreamMeta, reason: 'stop' | 'length' = 'stop'): string {
  const enc = chat.streamEncoder(m)
  return enc.start() + SSE_KEEP_ALIVE + TEXT_PARTS.map((t) => enc.text(t)).join('') + enc.text('') + enc.finish(reason, usage)
}

const chatParams = { model: 'tiny', messages: [{ role: 'user' as const, content: 'hi' }] }

describe('OpenAI chat streaming through the official SDK', () => {
  it('yields the role first, then the content, then the finish reason', async () => {
    const client = clientFor(() => sseResponse(chatStream(meta)))
    const chunks = []
    for await (const chunk of await client.chat.completions.create({ ...chatParams, stream: true })) chunks.push(chunk)
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' })
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Héllo 👋')
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop')
    expect(chunks.every((c) => c.id === 'chatcmpl-req-1' && c.object === 'chat.completion.chunk' && c.model === 'tiny')).toBe(true)
    expect(chunks.every((c) => !('usage' in c))).toBe(true)
  })

  it('assembles a final completion with the stream helper', async () => {
    const client = clientFor(() => sseResponse(chatStream(meta, 'length')))
    const final = await client.chat.completions.stream({ ...chatParams, stream: true }).finalChatCompletion()
    expect(final.choices[0]!.message.role).toBe('assistant')
    expect(final.choices[0]!.message.content).toBe('Héllo 👋')
    expect(final.choices[0]!.finish_reason).toBe('length')
  })

  it('ends with a usage chunk with empty choices when include_usage is set', async () => {
    const client = clientFor(() => sseResponse(chatStream({ ...meta, includeUsage: true })))
    const chunks = []
    const stream = await client.chat.completions.create({ ...chatParams, stream: true, stream_options: { include_usage: true } })
    for await (const chunk of stream) chunks.push(chunk)
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    expect(last.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8, prompt_tokens_details: { cached_tokens: 2 } })
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true)
  })

  it('gives the stream helper the usage from the usage chunk', async () => {
    const client = clientFor(() => sseResponse(chatStream({ ...meta, includeUsage: true })))
    const final = await client.chat.completions
      .stream({ ...chatParams, stream: true, stream_options: { include_usage: true } })
      .finalChatCompletion()
    expect(final.usage?.total_tokens).toBe(8)
    expect(final.usage?.prompt_tokens_details?.cached_tokens).toBe(2)
    expect(final.choices[0]!.message.content).toBe('Héllo 👋')
  })

  it('turns a mid-stream error frame into an APIError carrying our code and message', async () => {
    const enc = chat.streamEncoder(meta)
    const body = enc.start() + enc.text('partial') + enc.error(new ApiError('timeout', 'The request deadline passed.'))
    const client = clientFor(() => sseResponse(body))
    const seen: string[] = []
    const consume = async () => {
      for await (const chunk of await client.chat.completions.create({ ...chatParams, stream: true })) seen.push(chunk.choices[0]?.delta.content ?? '')
    }
    const err = await consume().then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.APIError)
    expect((err as InstanceType<typeof OpenAI.APIError>).message).toContain('The request deadline passed.')
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('timeout')
    expect(seen.join('')).toBe('partial')
  })

  it('never leaks an unknown error mid-stream', async () => {
    const enc = chat.streamEncoder(meta)
    const body = enc.start() + enc.error(new Error('secret at /opt/key'))
    const client = clientFor(() => sseResponse(body))
    const err = await client.chat.completions.stream({ ...chatParams, stream: true }).finalChatCompletion().then(
      () => undefined,
      (e: unknown) => e as Error,
    )
    expect(err?.message).toContain(INTERNAL_ERROR_MESSAGE)
    expect(err?.message).not.toContain('secret')
  })
})

describe('OpenAI completions streaming through the official SDK', () => {
  it('yields text_completion chunks, the finish reason and the usage chunk', async () => {
    const enc = completions.streamEncoder({ ...meta, includeUsage: true })
    const body = enc.start() + TEXT_PARTS.map((t) => enc.text(t)).join('') + enc.finish('stop', usage)
    const client = clientFor(() => sseResponse(body))
    const chunks = []
    const stream = await client.completions.create({ model: 'tiny', prompt: 'hi', stream: true, stream_options: { include_usage: true } })
    for await (const chunk of stream) chunks.push(chunk)
    expect(chunks.map((c) => c.choices[0]?.text ?? '').join('')).toBe('Héllo 👋')
    expect(chunks.every((c) => c.object === 'text_completion' && c.id === 'cmpl-req-1')).toBe(true)
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop')
    expect(chunks.at(-1)!.choices).toEqual([])
    expect(chunks.at(-1)!.usage?.total_tokens).toBe(8)
    expect(chunks.at(-1)!.usage?.prompt_tokens_details?.cached_tokens).toBe(2)
  })
})

describe('OpenAI non-streaming bodies through the official SDK', () => {
  it('parses a chat.completion', async () => {
    const client = clientFor(() => jsonResponse(chat.jsonBody(meta, [textChoice('Hello', 'stop')], usage)))
    const res = await client.chat.completions.create(chatParams)
    expect(res.object).toBe('chat.completion')
    expect(res.id).toBe('chatcmpl-req-1')
    expect(res.choices[0]!.message).toEqual({ role: 'assistant', content: 'Hello' })
    expect(res.choices[0]!.finish_reason).toBe('stop')
    expect(res.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8, prompt_tokens_details: { cached_tokens: 2 } })
    expect(res.usage?.prompt_tokens_details?.cached_tokens).toBe(2)
  })

  it('parses a text_completion', async () => {
    const client = clientFor(() => jsonResponse(completions.jsonBody(meta, [textChoice('Hello', 'length')], usage)))
    const res = await client.completions.create({ model: 'tiny', prompt: 'hi' })
    expect(res.object).toBe('text_completion')
    expect(res.choices[0]!.text).toBe('Hello')
    expect(res.choices[0]!.finish_reason).toBe('length')
  })
})

describe('OpenAI error bodies through the official SDK', () => {
  const cases = [
    [new ApiError('invalid_request', "'temperature' must be at most 2.", { param: 'temperature' }), 400, OpenAI.BadRequestError],
    [new ApiError('unauthorized', 'Invalid API key.'), 401, OpenAI.AuthenticationError],
    [new ApiError('forbidden', 'This key may not use this model.'), 403, OpenAI.PermissionDeniedError],
    [new ApiError('model_not_found', "The model 'nope' does not exist."), 404, OpenAI.NotFoundError],
    [new ApiError('rate_limited', 'Rate limit reached.', { retryAfterMs: 1500 }), 429, OpenAI.RateLimitError],
    [new ApiError('overloaded', 'The server is overloaded.', { retryAfterMs: 200 }), 503, OpenAI.InternalServerError],
    [new ApiError('upstream_unavailable', 'No GPU node is reachable.'), 502, OpenAI.InternalServerError],
    [new ApiError('timeout', 'The request timed out.'), 504, OpenAI.InternalServerError],
  ] as const

  for (const [apiError, status, ErrorClass] of cases) {
    it(`renders ${apiError.code} as ${status} and the SDK raises ${ErrorClass.name}`, async () => {
      const r = renderError(chat.errors, apiError)
      expect(r.status).toBe(status)
      const client = clientFor(() => jsonResponse(r.body, r.status, r.headers))
      const err = await client.chat.completions.create(chatParams).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(ErrorClass)
      const apiErr = err as InstanceType<typeof OpenAI.APIError>
      expect(apiErr.status).toBe(status)
      expect(apiErr.message).toContain(apiError.message)
      expect(apiErr.code).toBe(apiError.code)
      expect(apiErr.param ?? undefined).toBe(apiError.param)
    })
  }

  it('shows an unknown error as a 500 with the fixed message', async () => {
    const r = renderError(chat.errors, new Error('db password is hunter2'))
    const client = clientFor(() => jsonResponse(r.body, r.status, r.headers))
    const err = (await client.chat.completions.create(chatParams).catch((e: unknown) => e)) as Error
    expect(err).toBeInstanceOf(OpenAI.InternalServerError)
    expect(err.message).toContain(INTERNAL_ERROR_MESSAGE)
    expect(err.message).not.toContain('hunter2')
  })

  it('lets the SDK retry an overload after retry-after-ms and then succeed', async () => {
    const overloaded = renderError(chat.errors, new ApiError('overloaded', 'busy', { retryAfterMs: 1 }))
    let calls = 0
    const client = clientFor(() => {
      calls += 1
      return calls === 1 ? jsonResponse(overloaded.body, overloaded.status, overloaded.headers) : jsonResponse(chat.jsonBody(meta, [textChoice('ok', 'stop')], usage))
    }, 1)
    const res = await client.chat.completions.create(chatParams)
    expect(res.choices[0]!.message.content).toBe('ok')
    expect(calls).toBe(2)
  })
})
