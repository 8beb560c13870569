import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import { readModelDir } from './model-dir.ts'
import { ModelTokenizer } from './tokenizer.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { greedyTexts } from '../../test/support/generate-text.ts'

/**
 * Some Hugging Face Optimum exports declare optional inputs: `use_cache_branch` (bool [1], merged
 * "--legacy" decoders) and `num_logits_to_keep` (int64 scalar; logits [B,N,V] for the last N
 * positions). `tiny-optimum-legacy` is `tiny` (same seed, same weights) declaring both, so the
 * runner, which feeds them only when declared, must produce exactly tiny's greedy texts.
 */

const OPTIONAL = ['use_cache_branch', 'num_logits_to_keep']
const root = mkdtempSync(join(tmpdir(), 'zerolayer-optional-inputs-'))
const plainDir = join(root, 'tiny')
const legacyDir = join(root, 'tiny-optimum-legacy')

beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: plainDir, seed: 42 })
  await generateModel({ preset: 'tiny-optimum-legacy', outDir: legacyDir, seed: 42 })
}, 30_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** The last prompt is longer than the 16-token prefill chunk (checked in the test). */
const PROMPTS = [
  'Hi',
  'The quick brown fox jumps',
  'Once upon a time',
  'zerolayer is a global LLM API that routes every request to the nearest node, and streams tokens back as they are made',
]

describe('Optimum optional inputs (use_cache_branch, num_logits_to_keep)', () => {
  it('are declared by tiny-optimum-legacy only, and num_logits_to_keep slices the logits', async () => {
    const plain = await ort.InferenceSession.create(join(plainDir, 'model.onnx'), ONE_THREAD)
    const legacy = await ort.InferenceSession.create(join(legacyDir, 'model.onnx'), ONE_THREAD)
    try {
      for (const name of OPTIONAL) {
        expect(legacy.inputNames).toContain(name)
        expect(plain.inputNames).not.toContain(name)
      }
      // One 5-token prompt, empty past: keep=1 gives [1,1,V] equal to tiny's last position; keep=0 keeps all.
      const s = 5
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from([10n, 20n, 30n, 40n, 50n]), [1, s]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(s).fill(1n), [1, s]),
        position_ids: new ort.Tensor('int64', BigInt64Array.from({ length: s }, (_, i) => BigInt(i)), [1, s]),
      }
      for (let i = 0; i < 4; i++) {
        for (const kv of ['key', 'value']) feeds[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, 4, 0, 64])
      }
      const full = (await plain.run(feeds)).logits as ort.Tensor
      const v = full.dims[2]!
      const branch = new ort.Tensor('bool', new Uint8Array([0]), [1])
      const keepOne = (await legacy.run({ ...feeds, use_cache_branch: branch, num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(1n), []) })).logits as ort.Tensor
      expect(keepOne.dims).toEqual([1, 1, v])
      expect(Array.from(keepOne.data as Float32Array)).toEqual(Array.from((full.data as Float32Array).subarray((s - 1) * v)))
      const keepAll = (await legacy.run({ ...feeds, use_cache_branch: branch, num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(0n), []) })).logits as ort.Tensor
      expect(keepAll.dims).toEqual([1, s, v])
    } finally {
      await plain.release()
      await legacy.release()
    }
  })

  it('the loader/runner feeds them: 4 concurrent greedy requests give tiny’s exact texts', async () => {
    expect(new ModelTokenizer(readModelDir(plainDir)).encodeText(PROMPTS[3]!).length).toBeGreaterThan(16)
    const plain = await greedyTexts(plainDir, PROMPTS)
    const legacy = await greedyTexts(legacyDir, PROMPTS)
    expect(legacy).toEqual(plain)
    expect(plain.every((t) => t.length > 0)).toBe(true)
  }, 20_000)
})
