/**
 * The model's generation_config.json fills what a request leaves unset (vLLM's
 * `--generation-config auto`): here temperature 0 and max_new_tokens 7 on a copy of tiny. A
 * request that sets a field keeps it.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'

const root = mkdtempSync(join(tmpdir(), 'zerolayer-generation-defaults-'))
let node: GpuNodeProcess
let client: OpenAI

beforeAll(async () => {
  const dir = join(root, 'tiny')
  cpSync('models/tiny', dir, { recursive: true })
  const path = join(dir, 'generation_config.json')
  writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), temperature: 0, max_new_tokens: 7 }))
  node = await startGpuNode({ env: { MODEL_DIR: dir } })
  client = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
}, 60_000)

afterAll(async () => {
  await node?.stop()
  rmSync(root, { recursive: true, force: true })
})

const messages = [{ role: 'user' as const, content: 'Tell me about the sea' }]
// ignore_eos (a vLLM extension the node accepts) so every answer runs to its token budget.
const chat = (extra: Record<string, unknown>) =>
  client.chat.completions.create({ model: node.model, messages, ...extra } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming)

describe("a model's generation_config.json", () => {
  it("fills the request's unset fields: greedy, 7 tokens", async () => {
    const silent = await chat({ seed: 7, ignore_eos: true })
    const greedy = await chat({ temperature: 0, max_tokens: 7, ignore_eos: true })
    expect(silent.usage?.completion_tokens).toBe(7)
    expect(silent.choices[0]!.message.content).toBe(greedy.choices[0]!.message.content)
  })

  it('gives way to what the request sets', async () => {
    const greedy = await chat({ temperature: 0, max_tokens: 12, ignore_eos: true })
    const sampled = await chat({ temperature: 1, seed: 7, max_tokens: 12, ignore_eos: true })
    expect(greedy.usage?.completion_tokens).toBe(12)
    expect(sampled.choices[0]!.message.content).not.toBe(greedy.choices[0]!.message.content)
  })
})
