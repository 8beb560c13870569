/**
 * A grammar that compiles slowly never holds the steps in flight: a node compiles a new grammar
 * on a trial thread first (GRAMMAR_COMPILE_BUDGET_MS), refuses one over the budget with a 400
 * naming the field, and goes on serving; a typical schema passes. The control: a node without
 * the trial accepts the same schema (it is valid, only slow), so the refusal is the budget's.
 */
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'

let bounded: GpuNodeProcess
let unbounded: GpuNodeProcess
beforeAll(async () => {
  ;[bounded, unbounded] = await Promise.all([startGpuNode({ env: { GRAMMAR_COMPILE_BUDGET_MS: '100' } }), startGpuNode({ env: { GRAMMAR_COMPILE_BUDGET_MS: '0' } })])
})
afterAll(async () => {
  await Promise.all([bounded?.stop(), unbounded?.stop()])
})

const client = (node: GpuNodeProcess) => new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 0 })
// ~28 KiB: 700 boolean properties compile in 0.3-0.6 s on the tiny vocabulary (the first compile
// in a thread is the slowest); a typical schema in ~3 ms.
const slow = { type: 'object', properties: Object.fromEntries(Array.from({ length: 700 }, (_, i) => [`property_number_${i}`, { type: 'boolean' }])), additionalProperties: false }
const typical = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false }
const ask = (schema: Record<string, unknown>) => ({ model: 'tiny', messages: [{ role: 'user' as const, content: 'JSON' }], max_tokens: 5, temperature: 0, response_format: { type: 'json_schema' as const, json_schema: { name: 's', schema } } })

describe('a new grammar compiles within GRAMMAR_COMPILE_BUDGET_MS or is refused', () => {
  it('over the budget: a 400 naming the field and the budget; the node serves on, and a typical schema passes', async () => {
    // A stream in flight beside the refused compile completes.
    const beside = client(bounded).chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 40, ignore_eos: true, temperature: 0 } as OpenAI.ChatCompletionCreateParamsNonStreaming)
    const err = await client(bounded).chat.completions.create(ask(slow)).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    const e = err as InstanceType<typeof OpenAI.BadRequestError>
    expect(e.param).toBe('response_format.json_schema.schema')
    expect(e.message).toContain('takes longer than 100 ms to compile')
    expect((await beside).usage!.completion_tokens).toBe(40)
    // The Responses API names its own field.
    const viaResponses = await client(bounded).responses.create({ model: 'tiny', input: 'JSON', max_output_tokens: 5, text: { format: { type: 'json_schema', name: 's', schema: slow } } }).then(() => undefined, (err: unknown) => err)
    expect((viaResponses as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('text.format.schema')
    const ok = await client(bounded).chat.completions.create(ask(typical))
    expect(ok.choices[0]!.finish_reason).toMatch(/^(stop|length)$/)
  })

  it('control: without the trial the same schema is served (valid, only slow)', async () => {
    const r = await client(unbounded).chat.completions.create(ask(slow))
    expect(r.choices[0]!.finish_reason).toBe('length')
  })
})
