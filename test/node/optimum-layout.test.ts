/**
 * A node pointed at a graph in Optimum's concat KV layout (with position_ids) says in its ready
 * line that it runs it on the slot KV path, edited at load, and why, and serves it; the
 * exactness of the edit is proven in gpu-node/src/model/slot-kv-edit-exact.test.ts.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateModel } from '../../gpu-node/tools/generate-model/generate-model.ts'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'

const root = mkdtempSync(join(tmpdir(), 'zerolayer-optimum-layout-'))
let node: GpuNodeProcess

beforeAll(async () => {
  const modelDir = join(root, 'tiny')
  await generateModel({ preset: 'tiny', outDir: modelDir, kvCache: 'concat' })
  node = await startGpuNode({ env: { MODEL_DIR: modelDir } })
}, 60_000)

afterAll(async () => {
  await node?.stop()
  rmSync(root, { recursive: true, force: true })
})

describe('a node serving an Optimum-layout (concat KV) graph', () => {
  it('logs at start that it runs it on the slot KV path, edited at load, and why', async () => {
    const ready = await node.waitForLog((l) => l.msg === 'ready')
    expect(ready).toMatchObject({ batching: 'continuous', kvCache: 'slots', kvCacheEdited: true, speculation: 'auto' })
    expect(String(ready.kvCacheWhy)).toMatch(/Concat\(past_key_values\.\*, new\).*position_ids/)
  })

  it('answers concurrent requests', async () => {
    const client = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
    const prompts = ['Hi', 'Once upon a time', 'The quick brown fox jumps over']
    const answers = await Promise.all(prompts.map((p) => client.completions.create({ model: node.model, prompt: p, max_tokens: 5, temperature: 0 })))
    for (const a of answers) expect(a.usage?.completion_tokens).toBeGreaterThan(0)
  })
})
