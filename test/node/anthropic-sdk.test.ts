/**
 * The official `@anthropic-ai/sdk` (unmodified) against the real GPU node process on the tiny
 * model: the streamed event order (raw, ping included), the MessageStream helper, stop reasons,
 * cumulative usage, system prompts, and the SDK's error classes for the node's 4xx answers.
 */
import Anthropic from '@anthropic-ai/sdk'
import type { MessageCreateParamsNonStreaming } from '@anthropic-ai/sdk/resources/messages'
import { Stream } from '@anthropic-ai/sdk/streaming'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'
import { longPrompt, pickStop } from './prompts.ts'

let node: GpuNodeProcess
let client: Anthropic

beforeAll(async () => {
  node = await startGpuNode()
  client = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 0 })
})

afterAll(async () => {
  await node?.stop()
})

const user = (content: string) => [{ role: 'user' as const, content }]
const greedy = (content: string, maxTokens: number, extra: object = {}): MessageCreateParamsNonStreaming =>
  ({ model: 'tiny', messages: user(content), max_tokens: maxTokens, temperature: 0, ...extra }) as MessageCreateParamsNonStreaming

function textOf(message: Anthropic.Message): string {
  return message.content.map((b) => (b.type === 'text' ? b.text : '')).join('')
}

describe('messages through the @anthropic-ai/sdk', () => {
  it('streams message_start, content_block_start, ping, deltas, content_block_stop, message_delta, message_stop', async () => {
    const response = await client.messages.create({ ...greedy('Tell me a story', 12), stream: true }).asResponse()
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/)
    expect(response.headers.get('cache-control')).toBe('no-cache')
    expect(response.headers.get('x-accel-buffering')).toBe('no')
    const events: Array<{ event: string | null; data: Record<string, unknown> }> = []
    for await (const sse of Stream.rawEvents(response)) {
      if (sse.event === null && sse.data === '') continue // a keep-alive comment
      events.push({ event: sse.event, data: JSON.parse(sse.data) as Record<string, unknown> })
    }

    const names = events.map((e) => e.event)
    // Every frame is named, and each name matches its payload's type.
    expect(events.every((e) => e.event !== null && e.data.type === e.event)).toBe(true)
    const deltas = names.filter((n) => n === 'content_block_delta').length
    expect(deltas).toBeGreaterThan(0)
    expect(names).toEqual(['message_start', 'content_block_start', 'ping', ...Array<string>(deltas).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop'])
    const start = events[0]!.data.message as Anthropic.Message
    expect(start).toMatchObject({ type: 'message', role: 'assistant', model: 'tiny', content: [], stop_reason: null })
    expect(start.usage.input_tokens).toBeGreaterThan(0)
    const messageDelta = events.at(-2)!.data as unknown as Anthropic.RawMessageDeltaEvent
    expect(messageDelta.delta.stop_reason).toBe('max_tokens')
    expect(messageDelta.usage.output_tokens).toBe(12)
  })

  it('yields parsed events whose text equals the non-streaming answer', async () => {
    const params = greedy('What is the capital of France?', 20)
    const whole = await client.messages.create(params)
    const stream = await client.messages.create({ ...params, stream: true })
    let text = ''
    let stopReason: string | null = null
    let outputTokens = 0
    let inputTokens = 0
    for await (const event of stream) {
      if (event.type === 'message_start') inputTokens = event.message.usage.input_tokens
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text
      if (event.type === 'message_delta') {
        stopReason = event.delta.stop_reason
        outputTokens = event.usage.output_tokens
      }
    }

    expect(whole.type).toBe('message')
    expect(whole.role).toBe('assistant')
    expect(textOf(whole)).toBe(text)
    expect(whole.stop_reason).toBe(stopReason)
    // message_start gives the whole prompt; the final usage splits it (Anthropic's arithmetic).
    expect(whole.usage.input_tokens + (whole.usage.cache_read_input_tokens ?? 0) + (whole.usage.cache_creation_input_tokens ?? 0)).toBe(inputTokens)
    expect(whole.usage.output_tokens).toBe(outputTokens)
    expect(['end_turn', 'max_tokens']).toContain(whole.stop_reason)
  })

  it('assembles a final message with stop_reason max_tokens and cumulative output_tokens', async () => {
    const stream = client.messages.stream(greedy('Count to one hundred', 9, { ignore_eos: true }))
    const texts: string[] = []
    stream.on('text', (t) => texts.push(t))
    const final = await stream.finalMessage()
    expect(final.stop_reason).toBe('max_tokens')
    expect(final.stop_sequence).toBeNull()
    expect(final.usage.output_tokens).toBe(9)
    expect(final.usage.input_tokens).toBeGreaterThan(0)
    expect(texts.join('')).toBe(textOf(final))
  })

  it('reports end_turn when the model ends its turn before max_tokens', async () => {
    // The tiny model's greedy answer to 'Hi' ends with an end token after a few dozen tokens.
    const final = await client.messages.stream(greedy('Hi', 200)).finalMessage()
    expect(final.stop_reason).toBe('end_turn')
    expect(final.stop_sequence).toBeNull()
    expect(final.usage.output_tokens).toBeLessThan(200)
  })

  it('stops at a stop sequence, names it, and leaves it out of the text', async () => {
    const params = greedy('Describe the sea', 48, { ignore_eos: true })
    const full = textOf(await client.messages.create(params))
    const stop = pickStop(full)
    const expected = full.slice(0, full.indexOf(stop))

    const final = await client.messages.stream({ ...params, stop_sequences: ['never-appears-zz', stop] }).finalMessage()
    expect(final.stop_reason).toBe('stop_sequence')
    expect(final.stop_sequence).toBe(stop)
    expect(textOf(final)).toBe(expected)

    const whole = await client.messages.create({ ...params, stop_sequences: [stop] })
    expect(whole.stop_reason).toBe('stop_sequence')
    expect(whole.stop_sequence).toBe(stop)
    expect(textOf(whole)).toBe(expected)
  })

  it('uses the system prompt (it changes the greedy answer and the input tokens)', async () => {
    const base = greedy('Who are you?', 16, { ignore_eos: true })
    const without = await client.messages.create(base)
    const withSystem = await client.messages.create({ ...base, system: 'You are a pirate. Answer only in pirate speak.' })
    const asBlocks = await client.messages.create({ ...base, system: [{ type: 'text', text: 'You are a pirate. Answer only in pirate speak.' }] })
    expect(withSystem.usage.input_tokens).toBeGreaterThan(without.usage.input_tokens)
    expect(textOf(withSystem)).not.toBe(textOf(without))
    expect(textOf(asBlocks)).toBe(textOf(withSystem))
  })
})

describe('errors through the @anthropic-ai/sdk', () => {
  it.each([
    ['an unknown field', { frobnicate: 1 }],
    ['empty messages', { messages: [] }],
    ['a temperature above 1', { temperature: 1.5 }],
    ['a server tool', { tools: [{ type: 'web_search_20250305', name: 'web_search' }] }],
  ])('rejects %s with BadRequestError (invalid_request_error)', async (_name, patch) => {
    const err = await client.messages.create({ ...greedy('hi', 4), ...patch } as MessageCreateParamsNonStreaming).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.BadRequestError)
    const e = err as InstanceType<typeof Anthropic.BadRequestError>
    expect(e.status).toBe(400)
    expect(e.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } })
  })

  it('rejects a prompt longer than the context, and max_tokens beyond it, with BadRequestError', async () => {
    const long = await client.messages.create(greedy(longPrompt(), 4)).catch((e: unknown) => e)
    expect(long).toBeInstanceOf(Anthropic.BadRequestError)
    expect((long as InstanceType<typeof Anthropic.BadRequestError>).message).toMatch(/prompt is too long/)
    const tooMany = await client.messages.create(greedy('hi', 5000)).catch((e: unknown) => e)
    expect(tooMany).toBeInstanceOf(Anthropic.BadRequestError)
    expect((tooMany as InstanceType<typeof Anthropic.BadRequestError>).message).toMatch(/exceed context limit/)
  })

  it('rejects an unknown model with NotFoundError (not_found_error), streamed or not', async () => {
    const err = await client.messages.create({ ...greedy('hi', 4), model: 'no-such-model' }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.NotFoundError)
    expect((err as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ type: 'error', error: { type: 'not_found_error' } })
    const err2 = await client.messages
      .stream({ ...greedy('hi', 4), model: 'no-such-model' })
      .finalMessage()
      .catch((e: unknown) => e)
    expect(err2).toBeInstanceOf(Anthropic.NotFoundError)
  })
})
