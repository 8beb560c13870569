/**
 * A node pointed at a graph without position_ids says at start that it batches only rows of
 * equal length, and why, that it keeps the concat KV path, and why, and serves it; the exactness itself is proven in
 * gpu-node/src/model/batching-exact.test.ts.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateModel } from '../../gpu-node/tools/generate-model/generate-model.ts'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'

const root = mkdtempSync(join(tmpdir(), 'zerolayer-derived-positions-'))
let node: GpuNodeProcess

beforeAll(async () => {
  const modelDir = join(root, 'tiny-derived-positions')
  await generateModel({ preset: 'tiny-derived-positions', outDir: modelDir })
  node = await startGpuNode({ env: { MODEL_DIR: modelDir } })
}, 60_000)

afterAll(async () => {
  await node?.stop()
  rmSync(root, { recursive: true, force: true })
})

describe('a node serving a graph without position_ids', () => {
  it('logs its batching mode and the reason at start', async () => {
    const warning = await node.waitForLog((l) => l.msg === 'batching: equal-length batches only')
    expect(String(warning.why)).toContain('position_ids')
    const ready = await node.waitForLog((l) => l.msg === 'ready')
    expect(ready).toMatchObject({ batching: 'equal-lengths', kvCache: 'concat', kvCacheEdited: false })
    // Its decode steps cannot verify drafts: SPEC_DECODING's default says so and changes nothing.
    expect(String(ready.speculation)).toMatch(/^off \(.*slot KV path/)
    expect(String(ready.kvCacheWhy)).toContain('position_ids')
  })

  it('answers concurrent requests', async () => {
    const client = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
    const prompts = ['Hi', 'Once upon a time', 'The quick brown fox jumps over']
    const answers = await Promise.all(prompts.map((p) => client.completions.create({ model: node.model, prompt: p, max_tokens: 5, temperature: 0 })))
    for (const a of answers) expect(a.usage?.completion_tokens).toBeGreaterThan(0)
  })
})
