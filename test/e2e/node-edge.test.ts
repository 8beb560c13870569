/**
 * The stack with the edge's Node entry (`npm start -- --edge node`: @hono/node-server, one
 * HTTP/2 connection per GPU node through undici) and two GPU nodes that each take one sequence at
 * a time and queue one more (MAX_BATCH=1, MAX_QUEUE=1), so overload is reachable through the edge:
 * - both SDKs end to end through the Node entry;
 * - a client that leaves mid-stream stops generation on the node (the request's AbortSignal);
 * - overload: the edge fails over from a full node to the next; with every node full it answers
 *   the last node's own 503 (OpenAI) / 529 (Anthropic) with its retry-after-ms, which the SDKs
 *   raise as InternalServerError / OverloadedError.
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import type { ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sseFrames } from '../node/sse-client.ts'
import { anthropicClient, edgePost, openaiClient, rejectionOf, serverTiming } from './support/clients.ts'
import { GEO, pollUntil, startTestStack, waitIdle, type TestStack } from './support/stack.ts'

let stack: TestStack

beforeAll(async () => {
  stack = await startTestStack({ regions: 2, edge: 'node', nodeVars: { MAX_BATCH: '1', MAX_QUEUE: '1' } })
})

afterAll(async () => {
  await stack?.stop()
})

const MODEL = 'tiny'
/** Without request.cf or x-zl-client-geo, the client stands at the edge's EDGE_LAT/EDGE_LON: us-east. */
const REGION = 'us-east'
const user = (content: string) => [{ role: 'user' as const, content }]
const LONG = { max_tokens: 900, ignore_eos: true }

describe('the Node entry end to end', () => {
  it('serves both SDKs, streaming and not, with the edge headers', async () => {
    const openai = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey })
    const { data, response } = await openai.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, ignore_eos: true } as ChatCompletionCreateParamsNonStreaming).withResponse()
    expect(data.choices[0]!.finish_reason).toBe('length')
    expect(data.usage!.completion_tokens).toBe(6)
    expect(response.headers.get('x-zl-region')).toBe(REGION)
    expect(response.headers.get('x-request-id')).toMatch(/^\S+$/)
    expect(serverTiming(response.headers).upstream).toBeGreaterThanOrEqual(0)
    expect(response.headers.get('x-ratelimit-limit-requests')).not.toBeNull()

    const streamed = await openai.chat.completions.stream({ model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, ignore_eos: true, stream: true } as ChatCompletionCreateParamsStreaming).finalChatCompletion()
    expect(streamed.choices[0]!.message.content).toBe(data.choices[0]!.message.content)

    const anthropic = anthropicClient(stack.edgeUrl, { apiKey: stack.devApiKey })
    const whole = await anthropic.messages.create({ model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, ignore_eos: true } as Anthropic.MessageCreateParamsNonStreaming)
    const final = await anthropic.messages.stream({ model: MODEL, messages: user('Hello'), max_tokens: 6, temperature: 0, ignore_eos: true } as Anthropic.MessageCreateParamsNonStreaming).finalMessage()
    expect(final.content).toEqual(whole.content)
    expect(final.stop_reason).toBe('max_tokens')
    expect(final.usage.output_tokens).toBe(6)
  })

  it('stops generation on the node when the client leaves mid-stream (OpenAI completions, raw fetch abort)', async () => {
    const before = await waitIdle(stack, REGION)
    const ac = new AbortController()
    const res = await edgePost(stack.edgeUrl, '/v1/completions', { model: MODEL, prompt: 'Talk forever', stream: true, ...LONG }, { apiKey: stack.devApiKey, signal: ac.signal })
    expect(res.status).toBe(200)
    let frames = 0
    await expect(
      (async () => {
        for await (const f of sseFrames(res)) if (!f.comment && ++frames === 3) ac.abort()
      })(),
    ).rejects.toThrow(/abort/i)
    const m = await pollUntil(
      () => stack.metrics(REGION),
      (s) => s.count('zl_abort_free_steps') > before.count('zl_abort_free_steps') && s.value('zl_num_requests_running') === 0,
      'the aborted sequence freed and nothing running',
    )
    expect(m.value('zl_request_failure_total', { reason: 'client_aborted' })).toBe(before.value('zl_request_failure_total', { reason: 'client_aborted' }) + 1)
    expect(m.value('zl_request_success_total')).toBe(before.value('zl_request_success_total'))
  })
})

describe('the prefix cache through the edge', () => {
  it('reports cached prompt tokens on turns 2–4 of a conversation, in both SDKs’ typed usage fields', async () => {
    const openai = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey })
    const system = 'You are a terse assistant for the zerolayer test suite. Answer in a few words, and never apologise.'
    const messages: Array<{ role: 'system' | 'user' | 'assistant'; content: string }> = [{ role: 'system', content: system }]
    const cached: number[] = []
    const promptTokens: number[] = []
    for (const question of ['Hello there', 'What next?', 'And after that?', 'Goodbye']) {
      messages.push({ role: 'user', content: question })
      const res = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 5, temperature: 0, ignore_eos: true } as ChatCompletionCreateParamsNonStreaming)
      expect(res.usage!.prompt_tokens).toBeGreaterThan(res.usage!.prompt_tokens_details?.cached_tokens ?? 0)
      cached.push(res.usage!.prompt_tokens_details?.cached_tokens ?? -1)
      promptTokens.push(res.usage!.prompt_tokens)
      messages.push({ role: 'assistant', content: res.choices[0]!.message.content ?? '' })
    }
    expect(cached[0]).toBe(0)
    // Each later turn resends the one before (its answer included): at least the system prompt's blocks are reused.
    expect(cached.slice(1).every((c) => c >= 16)).toBe(true)
    expect(cached[3]!).toBeGreaterThan(cached[1]!)

    const anthropic = anthropicClient(stack.edgeUrl, { apiKey: stack.devApiKey })
    const final = await anthropic.messages.stream({ model: MODEL, system, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 5, temperature: 0, ignore_eos: true } as Anthropic.MessageCreateParamsNonStreaming).finalMessage()
    // The same prompt as turn 1 (one chat template): cached now, and Anthropic's arithmetic adds up to it.
    expect(final.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(16)
    expect(final.usage.input_tokens + (final.usage.cache_read_input_tokens ?? 0) + (final.usage.cache_creation_input_tokens ?? 0)).toBe(promptTokens[0])
  })
})

describe('superseded requests through the edge (x-zl-supersede)', () => {
  const SUPERSEDE = { 'x-zl-supersede': 'editor-session-1' }

  it('a newer request ends the older stream with a superseded error both SDKs raise, and frees its sequence on the node', async () => {
    const before = await waitIdle(stack, REGION)
    const openai = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey, maxRetries: 2 })
    const older = await openai.completions.create({ model: MODEL, prompt: 'def complete(', stream: true, ...LONG } as never, { headers: SUPERSEDE })
    let chunks = 0
    const olderEnd = rejectionOf(
      (async () => {
        for await (const _ of older as unknown as AsyncIterable<unknown>) chunks++
      })(),
    )
    await pollUntil(() => stack.metrics(REGION), (m) => m.value('zl_num_requests_running') === 1, 'the older request running')
    const newer = await openai.completions.create({ model: MODEL, prompt: 'def complete(x', max_tokens: 4, ignore_eos: true } as never, { headers: SUPERSEDE })
    expect((newer as { choices: Array<{ finish_reason: string }> }).choices[0]!.finish_reason).toBe('length')
    const e = await olderEnd
    expect(e).toBeInstanceOf(OpenAI.APIError)
    expect((e as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'superseded' })
    expect(chunks).toBeLessThan(LONG.max_tokens)
    const m = await pollUntil(
      () => stack.metrics(REGION),
      (s) => s.count('zl_abort_free_steps') > before.count('zl_abort_free_steps') && s.value('zl_num_requests_running') === 0,
      'the superseded sequence freed and nothing running',
    )
    // Freed within two steps of the abort, as a disconnect is.
    expect(m.value('zl_abort_free_steps_sum') - before.value('zl_abort_free_steps_sum')).toBeLessThanOrEqual(2)
    expect(m.value('zl_request_failure_total', { reason: 'superseded' })).toBe(before.value('zl_request_failure_total', { reason: 'superseded' }) + 1)
  })

  it('a superseded JSON request is a 409 ConflictError the SDK does not retry (Anthropic)', async () => {
    const before = await waitIdle(stack, REGION)
    const anthropic = anthropicClient(stack.edgeUrl, { apiKey: stack.devApiKey, maxRetries: 2 })
    const older = rejectionOf(anthropic.messages.create({ model: MODEL, messages: user('write a function'), ...LONG } as Anthropic.MessageCreateParamsNonStreaming, { headers: SUPERSEDE }))
    await pollUntil(() => stack.metrics(REGION), (m) => m.value('zl_num_requests_running') === 1, 'the older request running')
    const newer = await anthropic.messages.create({ model: MODEL, messages: user('write a function that'), max_tokens: 4, ignore_eos: true } as Anthropic.MessageCreateParamsNonStreaming, { headers: SUPERSEDE })
    expect(newer.stop_reason).toBe('max_tokens')
    const e = (await older) as InstanceType<typeof Anthropic.APIError>
    expect(e).toBeInstanceOf(Anthropic.ConflictError)
    expect(e.status).toBe(409)
    expect(e.headers!.get('x-should-retry')).toBe('false')
    expect(e.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringMatching(/x-zl-supersede/) } })
    const m = await pollUntil(() => stack.metrics(REGION), (s) => s.value('zl_num_requests_running') === 0, 'nothing running')
    // One attempt, not three: the SDK took x-should-retry: false.
    expect(m.value('zl_request_failure_total', { reason: 'superseded' })).toBe(before.value('zl_request_failure_total', { reason: 'superseded' }) + 1)
  })

  it('a newer request on another node ends the older one too: the edge tells the older node', async () => {
    const key = { 'x-zl-supersede': 'editor-session-2' }
    const before = await waitIdle(stack, REGION)
    const near = (region: string) => openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey, geo: GEO[region]! })
    const older = await near(REGION).completions.create({ model: MODEL, prompt: 'def far(', stream: true, ...LONG } as never, { headers: key }).withResponse()
    expect(older.response.headers.get('x-zl-region')).toBe(REGION)
    const olderEnd = rejectionOf(
      (async () => {
        for await (const _ of older.data as unknown as AsyncIterable<unknown>);
      })(),
    )
    await pollUntil(() => stack.metrics(REGION), (m) => m.value('zl_num_requests_running') === 1, 'the older request running')
    const newer = await near('eu-west').completions.create({ model: MODEL, prompt: 'def far(x', max_tokens: 4, ignore_eos: true } as never, { headers: key }).withResponse()
    expect(newer.response.headers.get('x-zl-region')).toBe('eu-west')
    expect(((await olderEnd) as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'superseded' })
    const m = await pollUntil(() => stack.metrics(REGION), (s) => s.value('zl_num_requests_running') === 0, 'nothing running on the older node')
    expect(m.value('zl_request_failure_total', { reason: 'superseded' })).toBe(before.value('zl_request_failure_total', { reason: 'superseded' }) + 1)
  })

  it('refuses a malformed key with a 400 naming the header, and a request with another key runs on', async () => {
    const openai = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey })
    const bad = await rejectionOf(openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2 }, { headers: { 'x-zl-supersede': 'has space' } }))
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError)
    expect((bad as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ param: 'x-zl-supersede' })
  })
})

describe('overload through the edge', () => {
  /**
   * The edge marks a node that answered 503/529 down for 10 s in its process (DESIGN.md §3 step 5),
   * after which it answers 502 upstream_unavailable without trying it; so the Anthropic case goes
   * through a second Node edge process (same configuration, its own mark-down state) started here.
   */
  let second: { url: string }
  const held: Array<{ abort: () => void; done: Promise<void> }> = []

  beforeAll(async () => {
    second = { url: await stack.startNodeEdge('edge-second') }
  })

  afterAll(async () => {
    for (const h of held) h.abort()
    await Promise.all(held.map((h) => h.done))
  })

  /** A long stream through the edge from a client next to `region`, read in the background until released. */
  async function holdStream(region: string, content: string): Promise<void> {
    const ac = new AbortController()
    const res = await edgePost(stack.edgeUrl, '/v1/chat/completions', { model: MODEL, messages: user(content), stream: true, ...LONG }, { apiKey: stack.devApiKey, geo: GEO[region]!, signal: ac.signal })
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-region')).toBe(region)
    const done = (async () => {
      try {
        for await (const _ of sseFrames(res));
      } catch {
        // aborted
      }
    })()
    held.push({ abort: () => ac.abort(), done })
  }

  it('with every node full, the last node’s 503 (OpenAI) / 529 (Anthropic) reaches the SDKs as InternalServerError / OverloadedError, after a failover', async () => {
    const full = (m: Awaited<ReturnType<TestStack['metrics']>>) => m.value('zl_num_requests_running') === 1 && m.value('zl_num_requests_waiting') === 1
    for (const region of ['us-east', 'eu-west']) {
      await waitIdle(stack, region)
      await holdStream(region, `fill ${region}: running`)
      await pollUntil(() => stack.metrics(region), (m) => m.value('zl_num_requests_running') === 1, `${region}: one running request`)
      await holdStream(region, `fill ${region}: queued`)
      await pollUntil(() => stack.metrics(region), full, `${region}: one running and one queued request`)
    }

    const oe = await rejectionOf(openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey, geo: GEO['us-east'] }).chat.completions.create({ model: MODEL, messages: user('one more'), max_tokens: 3 }))
    expect(oe).toBeInstanceOf(OpenAI.InternalServerError)
    const o = oe as InstanceType<typeof OpenAI.APIError>
    expect(o.status).toBe(503)
    expect(o.error).toMatchObject({ type: 'server_error', code: 'overloaded' })
    expect(Number(o.headers!.get('retry-after-ms'))).toBeGreaterThan(0)
    expect(o.headers!.get('x-should-retry')).toBe('true')
    // Both nodes were tried: the answer is the second one's, after one failed attempt.
    expect(o.headers!.get('x-zl-failover')).toBe('1')
    expect(['us-east', 'eu-west']).toContain(o.headers!.get('x-zl-region'))

    const ae = await rejectionOf(anthropicClient(second.url, { apiKey: stack.devApiKey, geo: GEO['eu-west'] }).messages.create({ model: MODEL, messages: user('one more'), max_tokens: 3 }))
    expect(ae).toBeInstanceOf(Anthropic.OverloadedError)
    const a = ae as InstanceType<typeof Anthropic.APIError>
    expect(a.status).toBe(529)
    expect(a.error).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } })
    expect(Number(a.headers!.get('retry-after-ms'))).toBeGreaterThan(0)
    expect(a.headers!.get('x-zl-failover')).toBe('1')

    // The held streams were never disturbed: each node still runs one and queues one.
    for (const region of ['us-east', 'eu-west']) expect(full(await stack.metrics(region))).toBe(true)
  })
})
