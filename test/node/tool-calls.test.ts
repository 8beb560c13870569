/**
 * Tool calling through the official SDKs (unmodified) against the real GPU node process on the
 * tiny model: OpenAI `tools` with every `tool_choice`, the stream helper's final completion equal
 * to the non-stream answer, a tool round trip; Anthropic `tool_use` / `tool_result` with
 * `messages.stream().finalMessage()` equal to `messages.create`; and a stream with calls continued
 * after every cut (x-zl-resume) byte for byte. The model is untrained: whatever it prefers, a
 * required call must be a call to an offered tool with arguments its schema accepts.
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { resumeHeader } from '../../shared/src/resume-wire.ts'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'
import { deliveredAfter, flushedAfter, streamFrames, writeEnds, type Path, type RawFrame } from './resume-client.ts'

let node: GpuNodeProcess
let openai: OpenAI
let anthropic: Anthropic

beforeAll(async () => {
  node = await startGpuNode()
  openai = new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 0 })
  anthropic = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 0 })
})

afterAll(async () => {
  await node?.kill()
})

const Weather = z.strictObject({ city: z.string().min(1).max(10), unit: z.enum(['c', 'f']) })
const Time = z.strictObject({ zone: z.enum(['utc', 'cet']) })
const weatherSchema = { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 10 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false }
const timeSchema = { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'], additionalProperties: false }
const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone', parameters: timeSchema } },
]
// The tiny model's vocabulary spells a call's tags out nearly a character a token.
const ask = { model: 'tiny', messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }], max_tokens: 300, temperature: 0, tools }

/** A call is to an offered tool, with arguments its schema accepts. */
function expectValidCall(call: { function: { name: string; arguments: string } }): void {
  const args = JSON.parse(call.function.arguments)
  if (call.function.name === 'get_weather') expect(Weather.parse(args)).toEqual(args)
  else {
    expect(call.function.name).toBe('get_time')
    expect(Time.parse(args)).toEqual(args)
  }
}

describe('OpenAI tools', () => {
  it('required: the answer is tool calls (content null, finish_reason tool_calls), each valid', async () => {
    const completion = await openai.chat.completions.create({ ...ask, tool_choice: 'required' })
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBeNull()
    expect(choice.message.tool_calls!.length).toBeGreaterThan(0)
    for (const call of choice.message.tool_calls!) {
      expect(call).toMatchObject({ type: 'function', id: expect.stringMatching(/^call_[0-9a-f]{24}$/) })
      expectValidCall(call as OpenAI.ChatCompletionMessageFunctionToolCall)
    }
  })

  it('a named tool without parallel calls: exactly one call, to it', async () => {
    const completion = await openai.chat.completions.create({ ...ask, tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false })
    const calls = completion.choices[0]!.message.tool_calls!
    expect(calls).toHaveLength(1)
    expect((calls[0] as OpenAI.ChatCompletionMessageFunctionToolCall).function.name).toBe('get_time')
    expectValidCall(calls[0] as OpenAI.ChatCompletionMessageFunctionToolCall)
  })

  it('none: plain text, no calls', async () => {
    const completion = await openai.chat.completions.create({ ...ask, max_tokens: 20, tool_choice: 'none' })
    expect(completion.choices[0]!.message.tool_calls).toBeUndefined()
    expect(typeof completion.choices[0]!.message.content).toBe('string')
  })

  for (const tool_choice of ['required', 'auto'] as const) {
    it(`${tool_choice}: the stream helper's final completion equals the non-stream answer`, async () => {
      // One request id for both: a call's id is derived from it.
      const same = { headers: { 'x-request-id': `helper-${tool_choice}` } }
      const whole = await openai.chat.completions.create({ ...ask, tool_choice }, same)
      const final = await openai.chat.completions.stream({ ...ask, tool_choice }, same).finalChatCompletion()
      const strip = (m: { content: string | null; tool_calls?: unknown[] }) => ({ content: m.content, tool_calls: m.tool_calls ?? [] })
      expect(strip(final.choices[0]!.message)).toEqual(strip(whole.choices[0]!.message))
      expect(final.choices[0]!.finish_reason).toBe(whole.choices[0]!.finish_reason)
    })
  }

  it('streams each call as OpenAI does: id, type and name in its first delta, then arguments in pieces', async () => {
    const stream = await openai.chat.completions.create({ ...ask, tool_choice: 'required', stream: true })
    const seen: Array<{ id?: string; name?: string; args: string[] }> = []
    for await (const chunk of stream) {
      for (const d of chunk.choices[0]?.delta.tool_calls ?? []) {
        if (d.id !== undefined) {
          expect(d.index).toBe(seen.length)
          expect(d.type).toBe('function')
          seen.push({ id: d.id, name: d.function!.name!, args: [d.function!.arguments ?? ''] })
        } else seen[d.index]!.args.push(d.function!.arguments!)
      }
    }
    expect(seen.length).toBeGreaterThan(0)
    for (const call of seen) expectValidCall({ function: { name: call.name!, arguments: call.args.join('') } })
    expect(seen[0]!.args.length).toBeGreaterThan(1)
  })

  it('a conversation that carries tool use: assistant tool_calls and tool results go back in', async () => {
    const first = await openai.chat.completions.create({ ...ask, tool_choice: 'required', parallel_tool_calls: false })
    const call = first.choices[0]!.message.tool_calls![0]!
    const next = await openai.chat.completions.create({
      ...ask,
      max_tokens: 10,
      messages: [...ask.messages, first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: '21 degrees' }],
    })
    expect(next.choices[0]!.finish_reason).toMatch(/^(stop|length|tool_calls)$/)
    const unmatched = await openai.chat.completions.create({ ...ask, messages: [...ask.messages, { role: 'tool', tool_call_id: 'call_nope', content: 'x' }] }).then(() => undefined, (e: unknown) => e)
    expect(unmatched).toBeInstanceOf(OpenAI.BadRequestError)
    expect((unmatched as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('messages[1].tool_call_id')
  })
})

describe('Anthropic tools', () => {
  const atools: Anthropic.Tool[] = [
    { name: 'get_weather', description: 'The weather in a city', input_schema: weatherSchema as Anthropic.Tool.InputSchema },
    { name: 'get_time', description: 'The time in a zone', input_schema: timeSchema as Anthropic.Tool.InputSchema },
  ]
  const aask = { model: 'tiny', max_tokens: 300, temperature: 0, messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }], tools: atools }

  it('any: tool_use blocks with inputs their schemas accept, stop_reason tool_use; the stream rebuilds the same message', async () => {
    const same = { headers: { 'x-request-id': 'anthropic-any' } }
    const message = await anthropic.messages.create({ ...aask, tool_choice: { type: 'any' } }, same)
    expect(message.stop_reason).toBe('tool_use')
    const uses = message.content.filter((b) => b.type === 'tool_use')
    expect(uses.length).toBeGreaterThan(0)
    for (const b of uses) {
      expect(b.id).toMatch(/^toolu_[0-9a-f]{24}$/)
      expectValidCall({ function: { name: b.name, arguments: JSON.stringify(b.input) } })
    }
    const final = await anthropic.messages.stream({ ...aask, tool_choice: { type: 'any' } }, same).finalMessage()
    expect(final.content).toEqual(message.content)
    expect(final.stop_reason).toBe('tool_use')
  })

  it('a tool_result round trip, and a tool_result that answers nothing is a 400 naming it', async () => {
    const first = await anthropic.messages.create({ ...aask, tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true } })
    const use = first.content.find((b) => b.type === 'tool_use')!
    expect(use.name).toBe('get_weather')
    const next = await anthropic.messages.create({
      ...aask,
      max_tokens: 10,
      messages: [...aask.messages, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 degrees' }] }],
    })
    expect(['end_turn', 'max_tokens', 'tool_use']).toContain(next.stop_reason)
    const orphan = await anthropic.messages.create({ ...aask, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: 'x' }] }] }).then(() => undefined, (e: unknown) => e)
    expect(orphan).toBeInstanceOf(Anthropic.BadRequestError)
    expect(JSON.stringify((orphan as InstanceType<typeof Anthropic.BadRequestError>).error)).toContain('messages[0].content[0].tool_use_id')
  })
})

describe('a stream with tool calls continued after any cut is the same stream', () => {
  /** A frame's bytes without the id line, `created` made equal (a continuation is stamped when it runs) and cache counts dropped. */
  const normal = (f: RawFrame) => {
    if (f.data === '[DONE]') return f.data
    const j = JSON.parse(f.data)
    delete j.created
    delete j.usage?.prompt_tokens_details
    for (const k of ['cache_read_input_tokens', 'cache_creation_input_tokens', 'input_tokens']) delete j.usage?.[k]
    return `${f.event ?? ''}|${JSON.stringify(j)}`
  }

  async function expectExactAtEveryCut(path: Path, body: unknown): Promise<void> {
    const headers = { 'x-request-id': `tools-${Math.random().toString(36).slice(2)}`, 'x-zl-resumable': '1' }
    const full = await streamFrames(node.url, path, body, headers)
    expect(full.status).toBe(200)
    const writes = writeEnds(full.frames)
    expect(writes.length).toBeGreaterThan(6)
    // Between the node's writes, every few (each is a request): the first, mid-call, the last.
    const cuts = writes.filter((_, k, all) => k % 7 === 0 || k === all.length - 1)
    for (const cut of cuts) {
      const cont = await streamFrames(node.url, path, body, { ...headers, 'x-zl-resume': resumeHeader(deliveredAfter(full.frames, cut), flushedAfter(full.frames, cut)) })
      expect(cont.status).toBe(200)
      expect([...full.frames.slice(0, cut), ...cont.frames].map(normal)).toEqual(full.frames.map(normal))
    }
  }

  it('chat completions, required calls', async () => {
    await expectExactAtEveryCut('/v1/chat/completions', { ...ask, tool_choice: 'required', stream: true })
  })

  it('messages, any', async () => {
    await expectExactAtEveryCut('/v1/messages', { model: 'tiny', max_tokens: 300, temperature: 0, stream: true, messages: [{ role: 'user', content: 'Weather?' }], tools: [{ name: 'get_weather', input_schema: weatherSchema }], tool_choice: { type: 'any' } })
  })

  it('control: a continuation that skips a delivered token is not the same stream', async () => {
    const body = { ...ask, tool_choice: 'required', stream: true }
    const headers = { 'x-request-id': 'tools-control', 'x-zl-resumable': '1' }
    const full = await streamFrames(node.url, '/v1/chat/completions', body, headers)
    const cut = full.frames.flatMap((f, i) => (f.id ? [i] : []))[20]!
    const delivered = deliveredAfter(full.frames, cut)
    const cont = await streamFrames(node.url, '/v1/chat/completions', body, { ...headers, 'x-zl-resume': resumeHeader(delivered.slice(0, -1), false) })
    expect([...full.frames.slice(0, cut), ...cont.frames].map(normal)).not.toEqual(full.frames.map(normal))
  })
})
