import { mkdtempSync, renameSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EXTERNAL_DATA_FILE, generateModel } from '../../tools/generate-model/generate-model.ts'
import { loadModel } from './load-model.ts'
import { greedyTexts } from '../../test/support/generate-text.ts'

/**
 * Models over 2 GB (protobuf's limit) come from torch.onnx and Optimum with their weights as ONNX
 * external data: model.onnx holds the graph, model.onnx_data beside it the initializers' bytes.
 * ONNX Runtime resolves the file against model.onnx's directory because the runner's worker
 * creates the session from the path (runner-worker.ts). tiny-qwen2 generated both ways must give
 * exactly the same greedy texts.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-external-data-'))
const inlineDir = join(root, 'inline', 'tiny-qwen2')
const externalDir = join(root, 'external', 'tiny-qwen2')


beforeAll(async () => {
  await generateModel({ preset: 'tiny-qwen2', outDir: inlineDir, seed: 42 })
  await generateModel({ preset: 'tiny-qwen2', outDir: externalDir, seed: 42, externalData: true })
}, 30_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

const PROMPTS = ['Hi', 'The quick brown fox jumps', 'Once upon a time, in a land far away, there lived']

const size = (dir: string, file: string): number => statSync(join(dir, file)).size

describe('a model with its weights as ONNX external data (model.onnx_data)', () => {
  it('keeps the weights out of model.onnx', () => {
    const inlineBytes = size(inlineDir, 'model.onnx')
    expect(size(externalDir, 'model.onnx')).toBeLessThan(64 * 1024)
    // The same bytes, plus the zeros that align each tensor to 4096.
    expect(size(externalDir, EXTERNAL_DATA_FILE)).toBeGreaterThan(0.99 * inlineBytes)
    expect(size(externalDir, EXTERNAL_DATA_FILE)).toBeLessThan(1.05 * inlineBytes)
  })

  it('loads and gives exactly the greedy texts of the same model with inline weights', async () => {
    const inline = await greedyTexts(inlineDir, PROMPTS)
    expect(await greedyTexts(externalDir, PROMPTS)).toEqual(inline)
    expect(inline.every((t) => t.length > 0)).toBe(true)
  }, 20_000)

  it('fails to load with a message naming model.onnx and the missing data file', async () => {
    renameSync(join(externalDir, EXTERNAL_DATA_FILE), join(externalDir, 'moved'))
    try {
      await expect(loadModel({ intraOpThreads: 1, modelDir: externalDir, executionProvider: 'cpu', kvBudgetBytes: 256 * 1024 * 1024 })).rejects.toThrow(
        /model\.onnx: ONNX Runtime could not load it .*model\.onnx_data/,
      )
    } finally {
      renameSync(join(externalDir, 'moved'), join(externalDir, EXTERNAL_DATA_FILE))
    }
  })
})
