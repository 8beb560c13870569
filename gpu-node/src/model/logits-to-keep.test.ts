import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateModel, isCurrentGeneratedModel } from '../../tools/generate-model/generate-model.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { greedyTexts } from '../../test/support/generate-text.ts'

/**
 * The `small` presets declare `num_logits_to_keep` alone (no use_cache_branch), so prefill runs
 * the LM head on the last position only. `tiny` with that flag (same seed, same weights) must give
 * tiny's exact greedy texts through the runner, with chunked and packed multi-prompt prefill.
 */
const root = mkdtempSync(join(tmpdir(), 'zerolayer-logits-to-keep-'))
const plainDir = join(root, 'tiny')
const keepDir = join(root, 'tiny-keep')

beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: plainDir, seed: 42 })
  await generateModel({ preset: 'tiny', outDir: keepDir, seed: 42, logitsToKeep: true })
}, 30_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

const PROMPTS = ['Hi', 'The quick brown fox jumps', 'Once upon a time', 'a prompt longer than the sixteen-token prefill chunk, so it is prefilled in pieces']

describe('num_logits_to_keep alone (the small presets)', () => {
  it('is declared without use_cache_branch, stamps the directory, and the runner gives tiny’s exact texts', async () => {
    const session = await ort.InferenceSession.create(join(keepDir, 'model.onnx'), ONE_THREAD)
    try {
      expect(session.inputNames).toContain('num_logits_to_keep')
      expect(session.inputNames).not.toContain('use_cache_branch')
    } finally {
      await session.release()
    }
    expect(isCurrentGeneratedModel(keepDir)).toBe(true)
    const plain = await greedyTexts(plainDir, PROMPTS)
    expect(await greedyTexts(keepDir, PROMPTS)).toEqual(plain)
    expect(plain.every((t) => t.length > 0)).toBe(true)
  }, 30_000)
})
