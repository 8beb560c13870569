/**
 * Log probabilities and `n` through the official `openai` SDK against the real GPU node process
 * (tiny model): OpenAI's shapes on chat and completions, streamed and not, each chunk's entries
 * the tokens of its own text; n choices with their own index and finish, usage summed, a seeded
 * request's choices the same every time, and a stream's choices the non-stream answer's.
 */
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { openAINode } from './openai-node.ts'

const on = openAINode()

const messages = [{ role: 'user' as const, content: 'Tell me about the sea.' }]
const chat = { model: 'tiny', messages, max_tokens: 12, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming

type Entry = { token: string; logprob: number; bytes: number[] | null; top_logprobs: Array<{ token: string; logprob: number }> }

/** An entry as OpenAI defines it: a log probability, its token's UTF-8 bytes, alternatives best first. */
function expectEntry(e: Entry, top: number): void {
  expect(e.logprob).toBeLessThanOrEqual(0)
  // A token that is part of a character reads as U+FFFD; any other is its bytes' UTF-8 text.
  if (!e.token.includes('\uFFFD')) expect(e.bytes).toEqual([...new TextEncoder().encode(e.token)])
  expect(e.top_logprobs).toHaveLength(top)
  for (let i = 1; i < e.top_logprobs.length; i++) expect(e.top_logprobs[i]!.logprob).toBeLessThanOrEqual(e.top_logprobs[i - 1]!.logprob)
  // The sampled token is no likelier than the likeliest.
  if (top > 0) expect(e.logprob).toBeLessThanOrEqual(e.top_logprobs[0]!.logprob + 1e-9)
}

describe('logprobs', () => {
  it('chat: one entry per token, the tokens join to the text; greedy picks the likeliest', async () => {
    const completion = await on.client.chat.completions.create({ ...chat, temperature: 0, logprobs: true, top_logprobs: 3 })
    const { content } = completion.choices[0]!.logprobs!
    expect(content).toHaveLength(12)
    for (const e of content!) {
      expectEntry(e as Entry, 3)
      expect(e.logprob).toBeCloseTo(e.top_logprobs[0]!.logprob, 9)
    }
    expect(content!.map((e) => e.token).join('')).toBe(completion.choices[0]!.message.content)
  })

  it('chat, streamed: each chunk carries the entries of its own tokens, and they are the non-stream ones', async () => {
    const whole = await on.client.chat.completions.create({ ...chat, temperature: 1, seed: 5, logprobs: true, top_logprobs: 2 })
    const stream = await on.client.chat.completions.create({ ...chat, temperature: 1, seed: 5, logprobs: true, top_logprobs: 2, stream: true })
    const entries: unknown[] = []
    for await (const chunk of stream) {
      const choice = chunk.choices[0]
      if (!choice?.delta.content) continue
      const mine = choice.logprobs!.content!
      expect(mine.map((e) => e.token).join('')).toBe(choice.delta.content)
      entries.push(...mine)
    }
    expect(entries).toEqual(whole.choices[0]!.logprobs!.content)
  })

  it('completions: tokens, token_logprobs, top_logprobs and text_offset, streamed and not', async () => {
    const body = { model: 'tiny', prompt: 'The sea is', max_tokens: 8, temperature: 0, logprobs: 2, ignore_eos: true }
    const whole = await on.client.completions.create(body)
    const lp = whole.choices[0]!.logprobs!
    expect(lp.tokens!.join('')).toBe(whole.choices[0]!.text)
    expect(lp.token_logprobs).toHaveLength(8)
    expect(lp.text_offset).toEqual(lp.tokens!.map((_, i) => lp.tokens!.slice(0, i).join('').length))
    for (const top of lp.top_logprobs!) expect(Object.keys(top).length).toBeLessThanOrEqual(2)
    const stream = await on.client.completions.create({ ...body, stream: true })
    const tokens: string[] = []
    const offsets: number[] = []
    for await (const chunk of stream) {
      const c = chunk.choices[0]
      if (!c?.text) continue
      tokens.push(...c.logprobs!.tokens!)
      offsets.push(...c.logprobs!.text_offset!)
    }
    expect(tokens).toEqual(lp.tokens)
    expect(offsets).toEqual(lp.text_offset)
  })

  it('out of range is a 400 naming the field', async () => {
    const err = await on.client.chat.completions.create({ ...chat, logprobs: true, top_logprobs: 21 }).then(() => undefined, (e: unknown) => e)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('top_logprobs')
    const err2 = await on.client.completions.create({ model: 'tiny', prompt: 'x', logprobs: 6 }).then(() => undefined, (e: unknown) => e)
    expect((err2 as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('logprobs')
  })
})

describe('n', () => {
  const seeded = { ...chat, temperature: 1, seed: 11, n: 3 }

  it('n choices, each with its index and finish_reason, usage summed; seeded: the same choices every time', async () => {
    const a = await on.client.chat.completions.create(seeded)
    expect(a.choices.map((c) => c.index)).toEqual([0, 1, 2])
    for (const c of a.choices) expect(c.finish_reason).toBe('length')
    expect(a.usage!.completion_tokens).toBe(36)
    expect(new Set(a.choices.map((c) => c.message.content)).size).toBeGreaterThan(1)
    const b = await on.client.chat.completions.create(seeded)
    expect(b.choices.map((c) => c.message.content)).toEqual(a.choices.map((c) => c.message.content))
    // Choice 0 is the n = 1 answer with the same seed.
    const one = await on.client.chat.completions.create({ ...seeded, n: 1 })
    expect(one.choices[0]!.message.content).toBe(a.choices[0]!.message.content)
  })

  it('streamed: every choice streams under its index and ends on its own; they are the non-stream choices', async () => {
    const whole = await on.client.chat.completions.create(seeded)
    const stream = await on.client.chat.completions.create({ ...seeded, stream: true, stream_options: { include_usage: true } })
    const texts = ['', '', '']
    const finished: number[] = []
    let usage: OpenAI.CompletionUsage | undefined
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage
      for (const c of chunk.choices) {
        texts[c.index] += c.delta.content ?? ''
        if (c.finish_reason) finished.push(c.index)
      }
    }
    expect(texts).toEqual(whole.choices.map((c) => c.message.content))
    expect(finished.sort()).toEqual([0, 1, 2])
    expect(usage!.completion_tokens).toBe(36)
  })

  it('completions: n with best_of = n; best_of > n and n > 8 are 400s', async () => {
    const r = await on.client.completions.create({ model: 'tiny', prompt: 'The sea', max_tokens: 4, temperature: 1, seed: 2, n: 2, best_of: 2, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming)
    expect(r.choices.map((c) => c.index)).toEqual([0, 1])
    const bad = await on.client.completions.create({ model: 'tiny', prompt: 'x', n: 2, best_of: 3 }).then(() => undefined, (e: unknown) => e)
    expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('best_of')
    const many = await on.client.chat.completions.create({ ...chat, n: 9 }).then(() => undefined, (e: unknown) => e)
    expect((many as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n')
  })
})
