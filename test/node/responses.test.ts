/**
 * The Responses API (`/v1/responses`) through the official `openai` SDK, unmodified, against the
 * real GPU node process (tiny model): `responses.create` with string and item input and
 * `instructions`, `responses.stream()` with its events and `finalResponse()` equal to the
 * created response, `output_text`, `responses.parse()` with `zodTextFormat`, a function-calling
 * round trip, the raw event stream's conformance, a stream continued after any cut (x-zl-resume)
 * byte for byte, and bad input.
 */
import OpenAI from 'openai'
import { zodTextFormat } from 'openai/helpers/zod'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { resumeHeader } from '../../shared/src/resume-wire.ts'
import { openAINode } from './openai-node.ts'
import { deliveredAfter, flushedAfter, streamFrames, writeEnds, type Path, type RawFrame } from './resume-client.ts'

const on = openAINode()

const RESPONSES = '/v1/responses' as Path
const weather = { type: 'function' as const, name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string', minLength: 1, maxLength: 8 } }, required: ['city'], additionalProperties: false }, strict: true }

describe('responses.create and responses.stream', () => {
  it('string input: a completed or incomplete response whose output_text is its message text, usage counted', async () => {
    const r = await on.client.responses.create({ model: 'tiny', input: 'Hello', max_output_tokens: 8, temperature: 0 })
    expect(r).toMatchObject({ object: 'response', model: 'tiny', id: expect.stringMatching(/^resp_/), max_output_tokens: 8, temperature: 0 })
    expect(r.status).toBe('incomplete')
    expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' })
    expect(r.output).toHaveLength(1)
    expect(r.output_text).toBe((r.output[0] as OpenAI.Responses.ResponseOutputMessage).content.map((c) => (c as { text: string }).text).join(''))
    expect(r.usage).toMatchObject({ output_tokens: 8, total_tokens: r.usage!.input_tokens + 8, input_tokens_details: { cached_tokens: expect.any(Number) } })
  })

  it('items and instructions go to the chat template: the same prompt as the chat completion of those messages', async () => {
    const viaResponses = await on.client.responses.create({ model: 'tiny', instructions: 'Be brief.', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'More?' }], max_output_tokens: 6, temperature: 0 })
    const viaChat = await on.client.chat.completions.create({ model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'More?' }], max_tokens: 6, temperature: 0 })
    expect(viaResponses.output_text).toBe(viaChat.choices[0]!.message.content)
    expect(viaResponses.usage!.input_tokens).toBe(viaChat.usage!.prompt_tokens)
  })

  it("the stream's events in OpenAI's order, and its finalResponse() is the created response", async () => {
    const same = { headers: { 'x-request-id': 'responses-stream-1' } }
    const body = { model: 'tiny', input: 'Tell me a story', max_output_tokens: 12, temperature: 0 }
    const created = await on.client.responses.create(body, same)
    const stream = on.client.responses.stream(body, same)
    const types: string[] = []
    stream.on('event', (e) => types.push(e.type))
    const final = await stream.finalResponse()
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'])
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete'])
    // The helper adds `parsed` fields; the second run finds the prompt in the prefix cache.
    const plain = (r: OpenAI.Responses.Response) => JSON.parse(JSON.stringify({ ...r, created_at: 0, output_parsed: undefined, usage: { ...r.usage, input_tokens_details: undefined } }), (k, v) => (k === 'parsed' ? undefined : v))
    expect(plain(final)).toEqual(plain(created))
  })

  it('responses.parse with zodTextFormat: output_parsed is an object the schema accepts', async () => {
    const Order = z.object({ item: z.string().min(1).max(10), qty: z.number().int().min(1).max(9) })
    const parsed = await on.client.responses.parse({ model: 'tiny', input: 'One order', text: { format: zodTextFormat(Order, 'order') }, max_output_tokens: 120, temperature: 0 })
    expect(parsed.status).toBe('completed')
    expect(Order.parse(parsed.output_parsed)).toEqual(parsed.output_parsed)
  })

  it('function calling: function_call items out (call_id, name, arguments), function_call_output back in', async () => {
    const first = await on.client.responses.create({ model: 'tiny', input: 'Weather in Paris?', tools: [weather], tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 300, temperature: 0 })
    expect(first.status).toBe('completed')
    const calls = first.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === 'function_call')
    expect(calls).toHaveLength(1)
    expect(calls[0]).toMatchObject({ name: 'get_weather', call_id: expect.stringMatching(/^call_/), status: 'completed' })
    expect(JSON.parse(calls[0]!.arguments).city.length).toBeGreaterThan(0)
    const next = await on.client.responses.create({ model: 'tiny', input: [{ role: 'user', content: 'Weather in Paris?' }, calls[0]!, { type: 'function_call_output', call_id: calls[0]!.call_id, output: '21C' }], tools: [weather], max_output_tokens: 5, temperature: 0 })
    expect(['completed', 'incomplete']).toContain(next.status)
    const streamed = await on.client.responses.stream({ model: 'tiny', input: 'Weather in Paris?', tools: [weather], tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 300, temperature: 0 }).finalResponse()
    expect(streamed.output.map((o) => (o.type === 'function_call' ? [o.name, o.arguments] : o.type))).toEqual([['get_weather', calls[0]!.arguments]])
  })
})

describe('the raw event stream', () => {
  const body = { model: 'tiny', input: 'Weather?', tools: [weather], tool_choice: 'auto', max_output_tokens: 40, temperature: 1, seed: 4, stream: true }

  it('every event names its type on its event line and in its data, numbers strictly increasing from 0, one terminal event, last', async () => {
    for (const b of [body, { ...body, tool_choice: 'required', max_output_tokens: 300 }]) {
      const { status, frames } = await streamFrames(on.node.url, RESPONSES, b, {})
      expect(status).toBe(200)
      const data = frames.map((f) => JSON.parse(f.data) as { type: string; sequence_number: number })
      expect(data.map((d) => d.type)).toEqual(frames.map((f) => f.event))
      expect(data.map((d) => d.sequence_number)).toEqual(data.map((_, i) => i))
      const terminal = data.filter((d) => /^response\.(completed|incomplete|failed)$/.test(d.type))
      expect(terminal).toHaveLength(1)
      expect(data[data.length - 1]).toBe(terminal[0])
    }
  })

  it('a stream continued after any cut (x-zl-resume) is the same stream', async () => {
    const headers = { 'x-request-id': 'responses-resume', 'x-zl-resumable': '1' }
    const b = { ...body, tool_choice: 'required', max_output_tokens: 300 }
    const full = await streamFrames(on.node.url, RESPONSES, b, headers)
    const writes = writeEnds(full.frames)
    expect(writes.length).toBeGreaterThan(6)
    const normal = (f: RawFrame) => {
      const j = JSON.parse(f.data)
      if (j.response) delete j.response.created_at
      if (j.response?.usage) delete j.response.usage.input_tokens_details
      return `${f.event}|${JSON.stringify(j)}`
    }
    for (const cut of writes.filter((_, k) => k % 9 === 0)) {
      const cont = await streamFrames(on.node.url, RESPONSES, b, { ...headers, 'x-zl-resume': resumeHeader(deliveredAfter(full.frames, cut), flushedAfter(full.frames, cut)) })
      expect([...full.frames.slice(0, cut), ...cont.frames].map(normal)).toEqual(full.frames.map(normal))
    }
  })
})

describe('bad input', () => {
  const bad = async (extra: object) => {
    const e = await on.client.responses.create({ model: 'tiny', input: 'x', ...extra } as OpenAI.Responses.ResponseCreateParamsNonStreaming).then(() => undefined, (err: unknown) => err)
    expect(e).toBeInstanceOf(OpenAI.BadRequestError)
    return e as InstanceType<typeof OpenAI.BadRequestError>
  }

  it('names the field it cannot honour or that is malformed', async () => {
    expect((await bad({ reasoning: { effort: 'high' } })).param).toBe('reasoning')
    expect((await bad({ background: true })).param).toBe('background')
    expect((await bad({ tools: [{ type: 'web_search' }] })).param).toBe('tools[0].type')
    expect((await bad({ input: [{ type: 'function_call_output', call_id: 'call_x', output: 'y' }] })).param).toBe('input[0].call_id')
    expect((await bad({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] })).message).toContain('only text content is supported')
    expect((await bad({ text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { n: { type: 'number', multipleOf: 2 } } } } } })).message).toContain("'text.format.schema.properties.n.multipleOf' is not supported")
    expect((await bad({ truncation: 'auto' })).param).toBe('truncation')
    expect((await bad({ previous_response_id: 'resp_x' })).param).toBe('previous_response_id')
  })
})
