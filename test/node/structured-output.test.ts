/**
 * Structured output through the official `openai` SDK (unmodified) against the real GPU node
 * process on the tiny model: `chat.completions.parse` with `zodResponseFormat`, the stream helper's
 * final completion, JSON mode, and the 400s for schemas the grammar engine cannot enforce or
 * compile. The model is untrained: whatever it prefers, the answer must parse.
 */
import OpenAI from 'openai'
import { zodResponseFormat } from 'openai/helpers/zod'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { openAINode } from './openai-node.ts'

const on = openAINode()

const Order = z.object({
  item: z.string().min(1).max(12),
  size: z.enum(['small', 'large']),
  quantity: z.number().int().min(1).max(20),
  gift: z.boolean(),
})
const ask = { model: 'tiny', messages: [{ role: 'user' as const, content: 'One order, as JSON.' }], max_tokens: 200, temperature: 0 }

describe('structured output (response_format)', () => {
  it('chat.completions.parse with zodResponseFormat returns a parsed object the schema accepts', async () => {
    const completion = await on.client.chat.completions.parse({ ...ask, response_format: zodResponseFormat(Order, 'order') })
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe('stop')
    expect(Order.parse(choice.message.parsed)).toEqual(choice.message.parsed)
    // Compact: no whitespace outside string literals.
    expect(choice.message.content!.replace(/"(?:[^"\\]|\\.)*"/g, '""')).not.toMatch(/\s/)
  })

  it("the stream helper's final completion is the same answer", async () => {
    const whole = await on.client.chat.completions.parse({ ...ask, response_format: zodResponseFormat(Order, 'order') })
    const stream = on.client.chat.completions.stream({ ...ask, response_format: zodResponseFormat(Order, 'order') })
    const final = await stream.finalChatCompletion()
    expect(final.choices[0]!.message.content).toBe(whole.choices[0]!.message.content)
    expect(final.choices[0]!.message.parsed).toEqual(whole.choices[0]!.message.parsed)
  })

  it('json_object: the answer is a JSON object', async () => {
    const completion = await on.client.chat.completions.create({ ...ask, max_tokens: 400, temperature: 1, seed: 7, response_format: { type: 'json_object' } })
    const { content, } = completion.choices[0]!.message
    if (completion.choices[0]!.finish_reason === 'stop') expect(JSON.parse(content!)).toBeTypeOf('object')
    else expect(completion.choices[0]!.finish_reason).toBe('length') // any object is unbounded: cut short, honestly
  })

  it('a schema keyword the engine cannot enforce is a 400 naming it, and the node serves on', async () => {
    const bad = (schema: Record<string, unknown>) =>
      on.client.chat.completions.create({ ...ask, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }).then(
        () => undefined,
        (e: unknown) => e,
      )
    const multiple = await bad({ type: 'object', properties: { n: { type: 'integer', multipleOf: 3 } } })
    expect(multiple).toBeInstanceOf(OpenAI.BadRequestError)
    expect((multiple as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("'response_format.json_schema.schema.properties.n.multipleOf' is not supported")
    const range = await bad({ type: 'number', maximum: 1 })
    expect((range as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('enforced only on "type": "integer"')
    const ref = await bad({ type: 'object', properties: { a: { $ref: '#/$defs/missing' } } })
    expect((ref as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('which it does not define')
    // A pattern JavaScript reads but the engine cannot compile: refused by the node, before any answer.
    const lookahead = await bad({ type: 'string', pattern: '^(?=a)[a-z]{3}$' })
    expect(lookahead).toBeInstanceOf(OpenAI.BadRequestError)
    expect((lookahead as InstanceType<typeof OpenAI.BadRequestError>).message).not.toContain('(?=a)')
    const after = await on.client.chat.completions.parse({ ...ask, response_format: zodResponseFormat(Order, 'order') })
    expect(after.choices[0]!.message.parsed).not.toBeNull()
  })

  it('ignore_eos with response_format is a 400', async () => {
    const e = await on.client.chat.completions
      .create({ ...ask, response_format: { type: 'json_object' }, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .then(() => undefined, (x: unknown) => x)
    expect(e).toBeInstanceOf(OpenAI.BadRequestError)
  })
})
