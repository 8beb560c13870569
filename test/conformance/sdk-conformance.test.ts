/**
 * SDK conformance through the whole local stack: the official `openai` and `@anthropic-ai/sdk`
 * clients (unmodified) against the edge under workerd (`wrangler dev`), which authenticates,
 * rate-limits in redis-server through the Upstash bridge, routes to the nearest of three real GPU
 * nodes (tiny model) and pipes their bytes back. Covers the three dialects streaming and not,
 * usage, stop sequences, finish/stop reasons, seeds, max_tokens, the SDK error classes for every
 * edge answer (400/401/404/413/429 and the SDK's own retry on retry-after-ms), nearest-region
 * routing on the live node table, and client aborts reaching the node.
 *
 * One stack for the file (started in beforeAll): wrangler dev takes seconds to start.
 */
import Anthropic from '@anthropic-ai/sdk'
import { Stream as AnthropicStream } from '@anthropic-ai/sdk/streaming'
import OpenAI from 'openai'
import type { ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createKey } from '../../infra/keys/key-admin.ts'
import { pickStop } from '../node/prompts.ts'
import { readAllFrames } from '../node/sse-client.ts'
import { anthropicClient, edgePost, openaiClient, recordingFetch, rejectionOf, serverTiming, type Attempt } from '../e2e/support/clients.ts'

/** Usage counts without the prefix cache's share: a repeated prompt is served partly from the cache. */
const counts = (u: OpenAI.CompletionUsage | null | undefined) => u && { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens }
const promptOf = (u: Anthropic.Usage) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0)
import { GEO, pollUntil, startTestStack, waitIdle, type TestStack } from '../e2e/support/stack.ts'

let stack: TestStack
let openai: OpenAI
let anthropic: Anthropic

beforeAll(async () => {
  stack = await startTestStack({ regions: 3, edge: 'wrangler' })
  openai = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey })
  anthropic = anthropicClient(stack.edgeUrl, { apiKey: stack.devApiKey })
})

afterAll(async () => {
  await stack?.stop()
})

const MODEL = 'tiny'
const user = (content: string) => [{ role: 'user' as const, content }]
/** Greedy chat params; `ignore_eos` (a vLLM extension the node accepts) makes max_tokens exact. */
const chat = (content: string, maxTokens: number, extra: object = {}) =>
  ({ model: MODEL, messages: user(content), max_tokens: maxTokens, temperature: 0, ...extra }) as ChatCompletionCreateParamsNonStreaming
const messages = (content: string, maxTokens: number, extra: object = {}) =>
  ({ model: MODEL, messages: user(content), max_tokens: maxTokens, temperature: 0, ...extra }) as Anthropic.MessageCreateParamsNonStreaming
const textOf = (m: Anthropic.Message) => m.content.map((b) => (b.type === 'text' ? b.text : '')).join('')

/** What the edge adds to every proxied answer (DESIGN.md §3 step 6). */
function expectEdgeHeaders(headers: Headers, dialect: 'openai' | 'anthropic'): void {
  expect(headers.get('x-request-id')).toMatch(/^\S+$/)
  expect(['us-east', 'eu-west', 'ap-south']).toContain(headers.get('x-zl-region'))
  const timing = serverTiming(headers)
  expect(timing.edge).toBeGreaterThanOrEqual(0)
  expect(timing.upstream).toBeGreaterThanOrEqual(0)
  expect(headers.get('x-zl-failover')).toBeNull()
  if (dialect === 'openai') {
    expect(Number(headers.get('x-ratelimit-limit-requests'))).toBeGreaterThan(0)
    expect(Number(headers.get('x-ratelimit-remaining-tokens'))).toBeGreaterThan(0)
  } else {
    expect(Number(headers.get('anthropic-ratelimit-requests-limit'))).toBeGreaterThan(0)
    expect(Number(headers.get('anthropic-ratelimit-tokens-remaining'))).toBeGreaterThan(0)
  }
}

describe('OpenAI chat completions through the edge', () => {
  it('answers non-streaming with an assistant message, finish_reason length at max_tokens, usage that adds up, and the edge headers', async () => {
    const { data, response } = await openai.chat.completions.create(chat('Count to one hundred', 7, { ignore_eos: true })).withResponse()
    expect(data.object).toBe('chat.completion')
    expect(data.model).toBe(MODEL)
    expect(data.choices).toHaveLength(1)
    expect(data.choices[0]!.message.role).toBe('assistant')
    expect(data.choices[0]!.message.content!.length).toBeGreaterThan(0)
    expect(data.choices[0]!.finish_reason).toBe('length')
    expect(data.usage!.completion_tokens).toBe(7)
    expect(data.usage!.prompt_tokens).toBeGreaterThan(0)
    expect(data.usage!.total_tokens).toBe(data.usage!.prompt_tokens + data.usage!.completion_tokens)
    expectEdgeHeaders(response.headers, 'openai')
  })

  it('streams a role delta first, content deltas, a finish_reason, then a usage chunk; the text equals the non-streaming answer', async () => {
    const params = chat('Describe the sea', 24, { ignore_eos: true })
    const whole = await openai.chat.completions.create(params)
    const stream = await openai.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } } as ChatCompletionCreateParamsStreaming)
    const chunks: OpenAI.ChatCompletionChunk[] = []
    for await (const chunk of stream) chunks.push(chunk)

    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant')
    expect(chunks.every((c) => Array.isArray(c.choices) && c.object === 'chat.completion.chunk')).toBe(true)
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')
    expect(text).toBe(whole.choices[0]!.message.content)
    const finishes = chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter((f) => f !== null)
    expect(finishes).toEqual(['length'])
    const usageChunk = chunks.at(-1)!
    expect(usageChunk.choices).toEqual([])
    expect(counts(usageChunk.usage)).toEqual(counts(whole.usage))
  })

  it('passes the SSE bytes through: text/event-stream, no-cache, x-accel-buffering no, and data: [DONE] last', async () => {
    const res = await edgePost(stack.edgeUrl, '/v1/chat/completions', { ...chat('Hello', 5, { ignore_eos: true }), stream: true }, { apiKey: stack.devApiKey })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/)
    expect(res.headers.get('cache-control')).toBe('no-cache')
    expect(res.headers.get('x-accel-buffering')).toBe('no')
    expectEdgeHeaders(res.headers, 'openai')
    const frames = await readAllFrames(res)
    expect(frames.at(-1)!.data).toBe('[DONE]')
    expect(frames.slice(0, -1).every((f) => (JSON.parse(f.data) as { object: string }).object === 'chat.completion.chunk')).toBe(true)
  })

  it('finishes with stop when the model ends its turn before max_tokens', async () => {
    // The tiny model's greedy answer to 'Hi' ends with an end token after a few dozen tokens.
    const res = await openai.chat.completions.create(chat('Hi', 200))
    expect(res.choices[0]!.finish_reason).toBe('stop')
    expect(res.usage!.completion_tokens).toBeLessThan(200)
  })

  it('stops at a stop sequence (finish_reason stop, the stop string left out), streaming and not', async () => {
    const params = chat('Describe the sea', 48, { ignore_eos: true })
    const full = (await openai.chat.completions.create(params)).choices[0]!.message.content!
    const stop = pickStop(full)
    const expected = full.slice(0, full.indexOf(stop))

    const whole = await openai.chat.completions.create({ ...params, stop: ['never-appears-zz', stop] })
    expect(whole.choices[0]!.finish_reason).toBe('stop')
    expect(whole.choices[0]!.message.content).toBe(expected)

    const stream = openai.chat.completions.stream({ ...params, stop, stream: true } as ChatCompletionCreateParamsStreaming)
    const final = await stream.finalChatCompletion()
    expect(final.choices[0]!.finish_reason).toBe('stop')
    expect(final.choices[0]!.message.content).toBe(expected)
  })

  it('reproduces a sampled answer from its seed (temperature 1), and another seed samples another answer', async () => {
    const sample = async (seed: number) =>
      (await openai.chat.completions.create({ model: MODEL, messages: user('Say something random'), max_tokens: 24, temperature: 1, seed, ignore_eos: true } as ChatCompletionCreateParamsNonStreaming)).choices[0]!.message.content
    const a = await sample(1234)
    expect(await sample(1234)).toBe(a)
    expect(await sample(4321)).not.toBe(a)
  })
})

describe('OpenAI completions through the edge', () => {
  it('answers streaming and not with the same text, finish_reason length, and usage', async () => {
    const params = { model: MODEL, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming
    const { data: whole, response } = await openai.completions.create(params).withResponse()
    expect(whole.object).toBe('text_completion')
    expect(whole.choices[0]!.finish_reason).toBe('length')
    expect(whole.usage!.completion_tokens).toBe(12)
    expectEdgeHeaders(response.headers, 'openai')

    const stream = await openai.completions.create({ ...params, stream: true, stream_options: { include_usage: true } } as OpenAI.CompletionCreateParamsStreaming)
    let text = ''
    const finishes: string[] = []
    let usage: OpenAI.CompletionUsage | undefined
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text += c.text
        if (c.finish_reason) finishes.push(c.finish_reason)
      }
      if (chunk.usage) usage = chunk.usage
    }
    expect(text).toBe(whole.choices[0]!.text)
    expect(finishes).toEqual(['length'])
    expect(counts(usage)).toEqual(counts(whole.usage))
  })

  it('stops at a stop sequence with finish_reason stop', async () => {
    const params = { model: MODEL, prompt: 'The sea is', max_tokens: 48, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming
    const full = (await openai.completions.create(params)).choices[0]!.text
    const stop = pickStop(full)
    const res = await openai.completions.create({ ...params, stop })
    expect(res.choices[0]!.finish_reason).toBe('stop')
    expect(res.choices[0]!.text).toBe(full.slice(0, full.indexOf(stop)))
  })
})

describe('Anthropic messages through the edge', () => {
  it('streams message_start, content_block_start, ping, deltas, content_block_stop, message_delta, message_stop with the edge headers', async () => {
    const response = await anthropic.messages.create({ ...messages('Tell me a story', 12, { ignore_eos: true }), stream: true }).asResponse()
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/)
    expect(response.headers.get('x-accel-buffering')).toBe('no')
    expectEdgeHeaders(response.headers, 'anthropic')
    const events: Array<{ event: string | null; data: Record<string, unknown> }> = []
    for await (const sse of AnthropicStream.rawEvents(response)) {
      if (sse.event === null && sse.data === '') continue // keep-alive comment
      events.push({ event: sse.event, data: JSON.parse(sse.data) as Record<string, unknown> })
    }
    const names = events.map((e) => e.event)
    expect(events.every((e) => e.data.type === e.event)).toBe(true)
    const deltas = names.filter((n) => n === 'content_block_delta').length
    expect(deltas).toBeGreaterThan(0)
    expect(names).toEqual(['message_start', 'content_block_start', 'ping', ...Array<string>(deltas).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop'])
    const messageDelta = events.at(-2)!.data as unknown as Anthropic.RawMessageDeltaEvent
    expect(messageDelta.delta.stop_reason).toBe('max_tokens')
    expect(messageDelta.usage.output_tokens).toBe(12)
  })

  it('answers non-streaming with the text the MessageStream helper assembles, stop_reason max_tokens and usage', async () => {
    const params = messages('Count to one hundred', 9, { ignore_eos: true })
    const { data: whole, response } = await anthropic.messages.create(params).withResponse()
    expect(whole.type).toBe('message')
    expect(whole.role).toBe('assistant')
    expect(whole.stop_reason).toBe('max_tokens')
    expect(whole.stop_sequence).toBeNull()
    expect(whole.usage.output_tokens).toBe(9)
    expect(whole.usage.input_tokens).toBeGreaterThan(0)
    expectEdgeHeaders(response.headers, 'anthropic')

    const stream = anthropic.messages.stream(params)
    const texts: string[] = []
    stream.on('text', (t) => texts.push(t))
    const final = await stream.finalMessage()
    expect(texts.join('')).toBe(textOf(whole))
    expect(textOf(final)).toBe(textOf(whole))
    expect(final.stop_reason).toBe('max_tokens')
    expect(final.usage.output_tokens).toBe(9)
    // Anthropic's arithmetic: the prompt is input + cache reads + cache writes, however much of it the repeat found cached.
    expect(promptOf(final.usage)).toBe(promptOf(whole.usage))
  })

  it('reports end_turn when the model ends its turn, and stop_sequence (named, left out of the text) at a stop sequence', async () => {
    const ended = await anthropic.messages.stream(messages('Hi', 200)).finalMessage()
    expect(ended.stop_reason).toBe('end_turn')
    expect(ended.usage.output_tokens).toBeLessThan(200)

    const params = messages('Describe the sea', 48, { ignore_eos: true })
    const full = textOf(await anthropic.messages.create(params))
    const stop = pickStop(full)
    const final = await anthropic.messages.stream({ ...params, stop_sequences: ['never-appears-zz', stop] }).finalMessage()
    expect(final.stop_reason).toBe('stop_sequence')
    expect(final.stop_sequence).toBe(stop)
    expect(textOf(final)).toBe(full.slice(0, full.indexOf(stop)))
  })
})

describe('OpenAI responses and tool calls through the edge', () => {
  it('responses.create and responses.stream: the same response, the edge headers, usage that adds up', async () => {
    const body = { model: MODEL, input: 'Tell me about the sea', instructions: 'Be brief.', max_output_tokens: 6, temperature: 0 }
    const { data: created, response } = await openai.responses.create(body).withResponse()
    expectEdgeHeaders(response.headers, 'openai')
    expect(created).toMatchObject({ object: 'response', status: 'incomplete', usage: { output_tokens: 6 } })
    expect(created.usage!.total_tokens).toBe(created.usage!.input_tokens + 6)
    const final = await openai.responses.stream(body).finalResponse()
    expect(final.output_text).toBe(created.output_text)
    expect(final.status).toBe('incomplete')
  })

  it('stored responses on the Workers edge: retrieve, input_items, a previous_response_id turn, delete', async () => {
    const first = await openai.responses.create({ model: MODEL, input: 'Tell me about the sea', max_output_tokens: 4, temperature: 0 })
    expect(await openai.responses.retrieve(first.id)).toEqual(first)
    const next = await openai.responses.stream({ model: MODEL, input: 'And the sky?', previous_response_id: first.id, max_output_tokens: 4, temperature: 0 }).finalResponse()
    expect(next.previous_response_id).toBe(first.id)
    const items = await openai.responses.inputItems.list(next.id, { order: 'asc' })
    expect(items.data.map((i) => (i.type === 'message' ? i.role : i.type))).toEqual(['user', 'assistant', 'user'])
    await openai.responses.delete(first.id)
    expect(await rejectionOf(openai.responses.retrieve(first.id))).toBeInstanceOf(OpenAI.NotFoundError)
    // A later turn kept its own copy of the conversation.
    expect((await openai.responses.inputItems.list(next.id)).data).toHaveLength(3)
  })

  it('chat tool calls (required) and an Anthropic tool_use, streamed through the byte pipe, equal the non-stream answers', async () => {
    const parameters = { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 8 } }, required: ['city'], additionalProperties: false }
    const ask = { ...chat('Weather in Paris?', 300), tools: [{ type: 'function' as const, function: { name: 'get_weather', parameters } }], tool_choice: 'required' as const, parallel_tool_calls: false }
    const same = { headers: { 'x-request-id': 'conformance-tools' } }
    const whole = await openai.chat.completions.create(ask, same)
    expect(whole.choices[0]!.finish_reason).toBe('tool_calls')
    const final = await openai.chat.completions.stream({ ...ask, stream: true }, same).finalChatCompletion()
    expect(final.choices[0]!.message.tool_calls).toEqual(whole.choices[0]!.message.tool_calls)
    const tools = [{ name: 'get_weather', input_schema: parameters as Anthropic.Tool.InputSchema }]
    const aask = { ...messages('Weather in Paris?', 300), tools, tool_choice: { type: 'any' as const } }
    const message = await anthropic.messages.create(aask, { headers: { 'x-request-id': 'conformance-tool-use' } })
    expect(message.stop_reason).toBe('tool_use')
    const streamed = await anthropic.messages.stream(aask, { headers: { 'x-request-id': 'conformance-tool-use' } }).finalMessage()
    expect(streamed.content).toEqual(message.content)
  })
})

describe('SDK error classes for the edge answers', () => {
  it('400: BadRequestError with the dialect body naming the field', async () => {
    const oe = await rejectionOf(openai.chat.completions.create({ ...chat('hi', 4), n: 9 }))
    expect(oe).toBeInstanceOf(OpenAI.BadRequestError)
    expect((oe as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ type: 'invalid_request_error', param: 'n' })

    const ae = await rejectionOf(anthropic.messages.create({ ...messages('hi', 4), temperature: 1.5 } as Anthropic.MessageCreateParamsNonStreaming))
    expect(ae).toBeInstanceOf(Anthropic.BadRequestError)
    expect((ae as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } })
  })

  it('401: AuthenticationError for an unknown key and for a malformed one', async () => {
    for (const apiKey of ['zl-unknownkey00000000000000000000000', 'sk-not-a-zerolayer-key']) {
      const oe = await rejectionOf(openaiClient(stack.edgeUrl, { apiKey }).chat.completions.create(chat('hi', 4)))
      expect(oe).toBeInstanceOf(OpenAI.AuthenticationError)
      expect((oe as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'authentication_error' })
      const ae = await rejectionOf(anthropicClient(stack.edgeUrl, { apiKey }).messages.create(messages('hi', 4)))
      expect(ae).toBeInstanceOf(Anthropic.AuthenticationError)
      expect((ae as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'authentication_error' } })
    }
  })

  it('404: NotFoundError for a model no node serves', async () => {
    const oe = await rejectionOf(openai.chat.completions.create({ ...chat('hi', 4), model: 'no-such-model' }))
    expect(oe).toBeInstanceOf(OpenAI.NotFoundError)
    expect((oe as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'model_not_found', param: 'model' })
    const ae = await rejectionOf(anthropic.messages.create({ ...messages('hi', 4), model: 'no-such-model' }))
    expect(ae).toBeInstanceOf(Anthropic.NotFoundError)
    expect((ae as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'not_found_error' } })
  })

  it('403: PermissionDeniedError for a disabled key; 404 NotFoundError for a model outside the key’s allowlist', async () => {
    const disabled = (await createKey(stack.upstash, { tenant: 'e2e-off', disabled: true })).key
    const oe = await rejectionOf(openaiClient(stack.edgeUrl, { apiKey: disabled }).chat.completions.create(chat('hi', 4)))
    expect(oe).toBeInstanceOf(OpenAI.PermissionDeniedError)
    expect((oe as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'permission_error' })
    const ae = await rejectionOf(anthropicClient(stack.edgeUrl, { apiKey: disabled }).messages.create(messages('hi', 4)))
    expect(ae).toBeInstanceOf(Anthropic.PermissionDeniedError)
    expect((ae as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'permission_error' } })

    // The same answer as for a model that does not exist: it reveals nothing about which do.
    const narrow = (await createKey(stack.upstash, { tenant: 'e2e-narrow', models: ['some-other-model'] })).key
    const ne = await rejectionOf(openaiClient(stack.edgeUrl, { apiKey: narrow }).chat.completions.create(chat('hi', 4)))
    expect(ne).toBeInstanceOf(OpenAI.NotFoundError)
    expect((ne as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'model_not_found' })
  })

  it('413: a body over MAX_BODY_BYTES (1 MiB) is refused (OpenAI APIError status 413, Anthropic ContentTooLargeError)', async () => {
    const big = 'a'.repeat(1024 * 1024 + 1)
    const oe = await rejectionOf(openai.chat.completions.create(chat(big, 4)))
    // openai 6.49 has no 413 subclass: the base APIError carries the status and body.
    expect(oe).toBeInstanceOf(OpenAI.APIError)
    expect((oe as InstanceType<typeof OpenAI.APIError>).status).toBe(413)
    expect((oe as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'invalid_request_error', code: 'request_too_large' })
    const ae = await rejectionOf(anthropic.messages.create(messages(big, 4)))
    expect(ae).toBeInstanceOf(Anthropic.ContentTooLargeError)
    expect((ae as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'request_too_large' } })
  })

  it('429: a key with rpm 2 gets RateLimitError on its third request, with retry-after-ms and the dialect rate-limit headers', async () => {
    // Requests/min is a sliding window over fixed minutes (@upstash/ratelimit): the previous
    // minute's requests count in part, so four requests straddling a minute boundary could all
    // be admitted. Start clear of one (a bounded wait on the clock, at most ~6 s).
    await pollUntil(async () => Date.now() % 60_000, (ms) => ms < 54_000, 'a moment clear of a minute boundary', 7_000, 100)
    const { key } = await createKey(stack.upstash, { tenant: 'e2e-rpm', rpm: 2 })
    const o = openaiClient(stack.edgeUrl, { apiKey: key })
    const first = await o.chat.completions.create(chat('one', 2)).withResponse()
    expect(first.response.headers.get('x-ratelimit-limit-requests')).toBe('2')
    expect(first.response.headers.get('x-ratelimit-remaining-requests')).toBe('1')
    await o.chat.completions.create(chat('two', 2))

    const oe = await rejectionOf(o.chat.completions.create(chat('three', 2)))
    expect(oe).toBeInstanceOf(OpenAI.RateLimitError)
    const oh = (oe as InstanceType<typeof OpenAI.APIError>).headers!
    expect((oe as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' })
    expect(Number(oh.get('retry-after-ms'))).toBeGreaterThan(0)
    expect(Number(oh.get('retry-after-ms'))).toBeLessThanOrEqual(60_000)
    expect(Number(oh.get('retry-after'))).toBe(Math.ceil(Number(oh.get('retry-after-ms')) / 1000))
    expect(oh.get('x-should-retry')).toBe('true')
    expect(oh.get('x-ratelimit-remaining-requests')).toBe('0')

    const ae = await rejectionOf(anthropicClient(stack.edgeUrl, { apiKey: key }).messages.create(messages('four', 2)))
    expect(ae).toBeInstanceOf(Anthropic.RateLimitError)
    const ah = (ae as InstanceType<typeof Anthropic.APIError>).headers!
    expect((ae as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: { type: 'rate_limit_error' } })
    expect(ah.get('anthropic-ratelimit-requests-limit')).toBe('2')
    expect(ah.get('anthropic-ratelimit-requests-remaining')).toBe('0')
    expect(Number(ah.get('retry-after-ms'))).toBeGreaterThan(0)
  })

  it('429 then the SDK retry (maxRetries 1) waits at least retry-after-ms, and the retried request is admitted', async () => {
    const { attempts, outcome } = await tokensRetryScenario(TOKEN_REFILL_PER_S / 2)
    expect(attempts.map((a) => a.status)).toEqual([429, 200])
    const waited = attempts[1]!.startMs - attempts[0]!.endMs
    const retryAfterMs = attempts[0]!.retryAfterMs!
    expect(retryAfterMs).toBeGreaterThan(0)
    expect(retryAfterMs).toBeLessThanOrEqual(1000)
    // Timers may fire up to a millisecond early on the ms-granular libuv clock.
    expect(waited).toBeGreaterThanOrEqual(retryAfterMs - 2)
    expect(outcome).toBe('ok')
  })

  // A request short by several refills (tpm/60 tokens each) is told the whole wait, so the SDK's retry succeeds.
  it('429 on tokens/min: a retry after retry-after-ms is admitted even when the deficit needs several refills', async () => {
    const { attempts } = await tokensRetryScenario(TOKEN_REFILL_PER_S * 2.5)
    expect(attempts.map((a) => a.status)).toEqual([429, 200])
  })
})

/** Tokens/min of the retry scenario's keys: a bucket refilled by tpm/60 = 100 tokens each second. */
const TOKEN_TPM = 6000
const TOKEN_REFILL_PER_S = TOKEN_TPM / 60

/**
 * A fresh key with tpm 6000; one raw request (padded with JSON whitespace: the edge charges
 * ceil(body bytes / 4) + max_tokens up front) leaves exactly `cost - deficit` tokens, so the SDK's
 * request that follows is refused by `deficit` tokens; the SDK (maxRetries 1) then retries after
 * retry-after-ms. If the box was so slow that the bucket refilled in between (first attempt
 * admitted), the scenario starts over with a new key (at most 3 times).
 */
async function tokensRetryScenario(deficit: number): Promise<{ attempts: Attempt[]; outcome: string }> {
  for (let round = 0; round < 3; round++) {
    const { key } = await createKey(stack.upstash, { tenant: 'e2e-tpm', tpm: TOKEN_TPM })
    const body = { model: MODEL, messages: user('retry me'), max_tokens: 400 }
    const cost = Math.ceil(JSON.stringify(body).length / 4) + body.max_tokens
    const drainBody = JSON.stringify({ model: MODEL, messages: user('drain'), max_tokens: 1 })
    const drainCost = TOKEN_TPM - (cost - deficit)
    const padded = drainBody + ' '.repeat(4 * (drainCost - 1) - drainBody.length)
    const drained = await edgePost(stack.edgeUrl, '/v1/chat/completions', padded, { apiKey: key })
    expect(drained.status).toBe(200)
    expect(Number(drained.headers.get('x-ratelimit-remaining-tokens'))).toBe(cost - deficit)
    await drained.body?.cancel()

    const attempts: Attempt[] = []
    const client = openaiClient(stack.edgeUrl, { apiKey: key, maxRetries: 1, fetch: recordingFetch(attempts) })
    const outcome = await client.chat.completions.create(body).then(
      () => 'ok',
      (e: unknown) => (e as Error).constructor.name,
    )
    if (attempts[0]?.status === 429) return { attempts, outcome }
  }
  throw new Error('the bucket refilled before the second request three times: the box is too slow for this scenario')
}

describe('nearest-region routing on the live node table', () => {
  it('GET /v1/models (SDK models.list) lists the model the live nodes serve', async () => {
    const ids: string[] = []
    for await (const m of openai.models.list()) ids.push(m.id)
    expect(ids).toEqual([MODEL])
  })

  it('GET /v1/regions (admin token) shows the three nodes from the registry, fresh, with their URLs', async () => {
    const res = await fetch(`${stack.edgeUrl}/v1/regions`, { headers: { authorization: `Bearer ${stack.adminToken}` } })
    expect(res.status).toBe(200)
    const table = (await res.json()) as { source: string; nodes: Array<{ id: string; region: string; url: string; source: string; fresh: boolean; down: boolean; models: string[] }> }
    expect(table.source).toBe('registry')
    expect(table.nodes.map((n) => n.region).sort()).toEqual(['ap-south', 'eu-west', 'us-east'])
    for (const n of table.nodes) {
      expect(n).toMatchObject({ source: 'registry', fresh: true, down: false, models: [MODEL], url: stack.nodeUrl(n.region) })
    }
  })

  it.each(['us-east', 'eu-west', 'ap-south'])('a client at the coordinates of %s is served by that region, in both dialects', async (region) => {
    const geo = GEO[region]!
    const o = await openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey, geo }).chat.completions.create(chat('where am I', 2)).withResponse()
    expect(o.response.headers.get('x-zl-region')).toBe(region)
    const a = await anthropicClient(stack.edgeUrl, { apiKey: stack.devApiKey, geo }).messages.create(messages('where am I', 2)).withResponse()
    expect(a.response.headers.get('x-zl-region')).toBe(region)
  })
})

describe('a client that leaves mid-stream stops generation on the node', () => {
  /** As long as tiny's context allows: ~1.6 s alone on this box, so only the abort can end it early. */
  const LONG = { max_tokens: 900, ignore_eos: true }

  type Counts = { freed: number; aborted: number; success: number }

  /**
   * Streams, leaves after three deltas (`leave` aborts through the SDK), and checks on the region
   * that served the stream (its x-zl-region: under load the edge may route past a region whose
   * heartbeat is late) that the aborted sequence freed its KV and nothing else changed.
   *
   * On a starved box the node can finish the whole stream before the abort reaches it (it then
   * counts a success, not an abort): that round proves nothing either way, so the scenario starts
   * over, at most 3 times.
   */
  async function expectAbortStopsNode(leave: () => Promise<Response>): Promise<void> {
    for (let round = 0; round < 3; round++) {
      const before = await countsBefore()
      const served = await leave()
      const region = served.headers.get('x-zl-region')!
      const was = before.get(region)!
      const m = await pollUntil(
        () => stack.metrics(region),
        (s) => (s.count('zl_abort_free_steps') > was.freed || s.value('zl_request_success_total') > was.success) && s.value('zl_num_requests_running') === 0,
        `${region}: the stream ended (aborted or finished) and nothing running`,
      )
      if (m.count('zl_abort_free_steps') === was.freed && m.value('zl_request_success_total') === was.success + 1) continue
      expect(m.count('zl_abort_free_steps')).toBe(was.freed + 1)
      expect(m.value('zl_request_failure_total', { reason: 'client_aborted' })).toBe(was.aborted + 1)
      expect(m.value('zl_request_success_total')).toBe(was.success)
      expect(m.value('zl_num_requests_waiting')).toBe(0)
      return
    }
    throw new Error('the node finished the stream before the abort reached it three times: the box is too slow for this scenario')
  }

  async function countsBefore(): Promise<Map<string, Counts>> {
    const out = new Map<string, Counts>()
    for (const region of Object.keys(GEO)) {
      const m = await waitIdle(stack, region)
      out.set(region, { freed: m.count('zl_abort_free_steps'), aborted: m.value('zl_request_failure_total', { reason: 'client_aborted' }), success: m.value('zl_request_success_total') })
    }
    return out
  }

  it('OpenAI chat (SDK stream.controller.abort())', async () => {
    await expectAbortStopsNode(async () => {
      const client = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey, geo: GEO['ap-south'] })
      const { data: stream, response } = await client.chat.completions.create({ model: MODEL, messages: user('Talk forever'), stream: true, ...LONG } as ChatCompletionCreateParamsStreaming).withResponse()
      let content = 0
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content && ++content === 3) {
          stream.controller.abort()
          break
        }
      }
      expect(content).toBe(3)
      return response
    })
  })

  it('Anthropic messages (SDK stream.controller.abort())', async () => {
    await expectAbortStopsNode(async () => {
      const client = anthropicClient(stack.edgeUrl, { apiKey: stack.devApiKey, geo: GEO['eu-west'] })
      const { data: stream, response } = await client.messages.create({ model: MODEL, messages: user('Talk forever'), stream: true, ...LONG } as Anthropic.MessageCreateParamsStreaming).withResponse()
      let deltas = 0
      for await (const event of stream) {
        if (event.type === 'content_block_delta' && ++deltas === 3) {
          stream.controller.abort()
          break
        }
      }
      expect(deltas).toBe(3)
      return response
    })
  })
})
