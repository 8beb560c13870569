/**
 * The official `openai` SDK (unmodified) against the real GPU node process on the tiny model:
 * chat and completions, streamed and whole, finish reasons, usage, stop strings, seeds, greedy
 * determinism, the model list, and the SDK's error classes for the node's 4xx answers.
 */
import OpenAI from 'openai'
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions'
import { describe, expect, it } from 'vitest'
import { openAINode } from './openai-node.ts'

/** Usage counts without the prefix cache's share: a repeated prompt is served partly from the cache. */
const counts = (u: OpenAI.CompletionUsage | null | undefined) => u && { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens }
import { longPrompt, pickStop } from './prompts.ts'

const on = openAINode()

const user = (content: string) => [{ role: 'user' as const, content }]
const greedy = (content: string, maxTokens: number): ChatCompletionCreateParamsNonStreaming => ({
  model: 'tiny',
  messages: user(content),
  max_tokens: maxTokens,
  temperature: 0,
})

describe('chat completions through the openai SDK', () => {
  it('streams the role first, then content, then finish_reason and a usage chunk', async () => {
    const stream = await on.client.chat.completions.create({ ...greedy('Tell me a story', 24), stream: true, stream_options: { include_usage: true } })
    const chunks = []
    for await (const chunk of stream) chunks.push(chunk)

    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant')
    const contentChunks = chunks.filter((c) => c.choices.length > 0 && c.choices[0]!.finish_reason === null)
    const text = contentChunks.map((c) => c.choices[0]!.delta.content ?? '').join('')
    expect(text.length).toBeGreaterThan(0)
    const finishChunk = chunks.find((c) => c.choices[0]?.finish_reason != null)!
    expect(finishChunk.choices[0]!.finish_reason).toBe('length')
    // The usage chunk comes last, with no choices.
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    expect(last.usage).toMatchObject({ completion_tokens: 24 })
    expect(last.usage!.prompt_tokens).toBeGreaterThan(0)
    expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + 24)
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'tiny')).toBe(true)
  })

  it('answers non-streaming with the same text and usage as the greedy stream', async () => {
    const params = greedy('What is the capital of France?', 30)
    const whole = await on.client.chat.completions.create(params)
    const stream = await on.client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })
    let streamed = ''
    let usage: OpenAI.CompletionUsage | null | undefined
    for await (const chunk of stream) {
      streamed += chunk.choices[0]?.delta.content ?? ''
      if (chunk.usage) usage = chunk.usage
    }

    expect(whole.object).toBe('chat.completion')
    expect(whole.choices).toHaveLength(1)
    expect(whole.choices[0]!.message.role).toBe('assistant')
    expect(whole.choices[0]!.message.content).toBe(streamed)
    expect(counts(whole.usage)).toEqual(counts(usage))
    // The stream repeated the prompt just served: it reused at least as much of it from the cache.
    expect(usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(whole.usage!.prompt_tokens_details!.cached_tokens!)
    const finish = whole.choices[0]!.finish_reason
    expect(['stop', 'length']).toContain(finish)
    if (finish === 'length') expect(whole.usage!.completion_tokens).toBe(30)
    else expect(whole.usage!.completion_tokens).toBeLessThanOrEqual(30)
  })

  it('assembles a final completion with the stream helper', async () => {
    const params = greedy('Write a haiku', 16)
    const runner = on.client.chat.completions.stream({ ...params, stream: true, stream_options: { include_usage: true } })
    const deltas: string[] = []
    runner.on('content', (delta) => deltas.push(delta))
    const final = await runner.finalChatCompletion()
    const whole = await on.client.chat.completions.create(params)

    expect(final.choices[0]!.message.role).toBe('assistant')
    expect(final.choices[0]!.message.content).toBe(whole.choices[0]!.message.content)
    expect(deltas.join('')).toBe(final.choices[0]!.message.content)
    expect(final.choices[0]!.finish_reason).toBe(whole.choices[0]!.finish_reason)
    expect(counts(final.usage)).toEqual(counts(whole.usage))
  })

  it('stops with finish_reason length after exactly max_tokens', async () => {
    const res = await on.client.chat.completions.create({ model: 'tiny', messages: user('Count to one hundred'), max_tokens: 7, ignore_eos: true } as ChatCompletionCreateParamsNonStreaming)
    expect(res.choices[0]!.finish_reason).toBe('length')
    expect(res.usage!.completion_tokens).toBe(7)
  })

  it('finishes with stop when the model ends its turn (EOS) before max_tokens', async () => {
    // The tiny model's greedy answer to 'Hi' ends with an end token after a few dozen tokens.
    const res = await on.client.chat.completions.create(greedy('Hi', 200))
    expect(res.choices[0]!.finish_reason).toBe('stop')
    expect(res.usage!.completion_tokens).toBeLessThan(200)
  })

  it('stops at a stop string, finish_reason stop, without the stop string in the text', async () => {
    const params = { ...greedy('Describe the sea', 48), ignore_eos: true } as ChatCompletionCreateParamsNonStreaming
    const full = (await on.client.chat.completions.create(params)).choices[0]!.message.content!
    const stop = pickStop(full)
    const expected = full.slice(0, full.indexOf(stop))

    const whole = await on.client.chat.completions.create({ ...params, stop })
    expect(whole.choices[0]!.finish_reason).toBe('stop')
    expect(whole.choices[0]!.message.content).toBe(expected)
    expect(whole.choices[0]!.message.content).not.toContain(stop)

    const stream = await on.client.chat.completions.create({ ...params, stop: [stop], stream: true })
    let streamed = ''
    let finish: string | null | undefined
    for await (const chunk of stream) {
      streamed += chunk.choices[0]?.delta.content ?? ''
      finish = chunk.choices[0]?.finish_reason ?? finish
    }
    expect(finish).toBe('stop')
    expect(streamed).toBe(expected)
  })

  it('reproduces a seeded temperature-1 sample and varies with the seed', async () => {
    const sample = async (seed: number) =>
      (await on.client.chat.completions.create({ model: 'tiny', messages: user('Say something random'), max_tokens: 24, temperature: 1, seed, ignore_eos: true } as ChatCompletionCreateParamsNonStreaming))
        .choices[0]!.message.content
    const [a, b, c, d] = await Promise.all([sample(1), sample(1), sample(2), sample(3)])
    expect(a).toBe(b)
    expect(c).not.toBe(a)
    expect(d).not.toBe(a)
    expect(d).not.toBe(c)
  })

  it('is deterministic when greedy (temperature 0), alone or concurrent', async () => {
    const params = greedy('Once upon a time', 20)
    const first = (await on.client.chat.completions.create(params)).choices[0]!.message.content
    const again = await Promise.all([1, 2, 3].map(() => on.client.chat.completions.create(params)))
    for (const r of again) expect(r.choices[0]!.message.content).toBe(first)
  })
})

describe('completions through the openai SDK', () => {
  it('streams text_completion chunks ending with finish_reason', async () => {
    const stream = await on.client.completions.create({ model: 'tiny', prompt: 'The weather today is', max_tokens: 12, temperature: 0, stream: true })
    const chunks = []
    for await (const chunk of stream) chunks.push(chunk)
    const text = chunks.map((c) => c.choices[0]?.text ?? '').join('')
    const whole = await on.client.completions.create({ model: 'tiny', prompt: 'The weather today is', max_tokens: 12, temperature: 0 })

    expect(chunks.every((c) => c.object === 'text_completion')).toBe(true)
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe(whole.choices[0]!.finish_reason)
    expect(text).toBe(whole.choices[0]!.text)
    expect(whole.object).toBe('text_completion')
    expect(whole.usage!.total_tokens).toBe(whole.usage!.prompt_tokens + whole.usage!.completion_tokens)
  })

  it('echoes the prompt before the completion, streamed and whole', async () => {
    const prompt = 'Echo me: '
    const plain = await on.client.completions.create({ model: 'tiny', prompt, max_tokens: 8, temperature: 0 })
    const echoed = await on.client.completions.create({ model: 'tiny', prompt, max_tokens: 8, temperature: 0, echo: true })
    expect(echoed.choices[0]!.text).toBe(prompt + plain.choices[0]!.text)

    const stream = await on.client.completions.create({ model: 'tiny', prompt, max_tokens: 8, temperature: 0, echo: true, stream: true })
    let text = ''
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? ''
    expect(text).toBe(prompt + plain.choices[0]!.text)
  })

  it('stops with length after exactly max_tokens', async () => {
    const res = await on.client.completions.create({ model: 'tiny', prompt: 'a b c', max_tokens: 5, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming)
    expect(res.choices[0]!.finish_reason).toBe('length')
    expect(res.usage!.completion_tokens).toBe(5)
  })
})

describe('models and errors through the openai SDK', () => {
  it('lists the served model', async () => {
    const ids = []
    for await (const m of on.client.models.list()) ids.push(m.id)
    expect(ids).toEqual(['tiny'])
  })

  it.each([
    ['n = 9', { n: 9 }, 'n'],
    ['an unknown field', { frobnicate: true }, 'frobnicate'],
    ['empty messages', { messages: [] }, 'messages'],
  ])('rejects %s with BadRequestError naming the field', async (_name, patch, param) => {
    const err = await on.client.chat.completions.create({ ...greedy('hi', 4), ...patch } as ChatCompletionCreateParamsNonStreaming).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    const e = err as InstanceType<typeof OpenAI.BadRequestError>
    expect(e.status).toBe(400)
    expect(e.type).toBe('invalid_request_error')
    expect(e.param).toBe(param)
  })

  it('rejects a prompt longer than the context with BadRequestError context_length_exceeded', async () => {
    const err = await on.client.completions.create({ model: 'tiny', prompt: longPrompt(), max_tokens: 4 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('context_length_exceeded')
    const err2 = await on.client.chat.completions.create(greedy('hi', 5000)).catch((e: unknown) => e)
    expect(err2).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err2 as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('context_length_exceeded')
  })

  it('rejects an unknown model with NotFoundError, streamed or not', async () => {
    const err = await on.client.chat.completions.create({ ...greedy('hi', 4), model: 'no-such-model' }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.NotFoundError)
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found')
    const err2 = await on.client.completions.create({ model: 'no-such-model', prompt: 'x', stream: true }).catch((e: unknown) => e)
    expect(err2).toBeInstanceOf(OpenAI.NotFoundError)
  })
})
