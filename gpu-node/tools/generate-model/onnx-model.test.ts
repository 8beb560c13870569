import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decoderInputNames, decoderOutputNames } from './decoder-io.ts'
import { generateModel } from './generate-model.ts'
import type { PresetName } from './presets.ts'
import { argmax, DecoderHarness, maxAbsDiff, std, type KvCache } from '../../test/support/decoder-harness.ts'

const TOLERANCE = 1e-4
/** Left-padding pads: attention_mask 0 and position_ids 1 (see FACTS.md). */
const PAD_POSITION = 1
const PROMPTS = [
  [72, 101, 108],
  [300, 12, 44, 45, 200, 7, 99],
  [5, 6, 7, 8, 9, 10, 11, 400, 401, 402, 403, 404],
]

// The Optimum (concat) interface of the generator; the slot interface the presets use is tested
// against it in slot-kv-cache.test.ts.
describe.each(['tiny', 'tiny-llama', 'tiny-qwen2'] as const satisfies readonly PresetName[])('generated %s model (concat KV) in onnxruntime-node', (preset) => {
  let dir: string
  let model: DecoderHarness

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), `zerolayer-${preset}-`))
    await generateModel({ preset, outDir: dir, seed: 42, kvCache: 'concat' })
    model = await DecoderHarness.open(dir)
  })
  afterAll(async () => {
    await model?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  it('declares exactly the Optimum decoder-with-past inputs and outputs', () => {
    expect(model.session.inputNames).toEqual(decoderInputNames(4))
    expect(model.session.outputNames).toEqual(decoderOutputNames(4))
    expect(model.session.inputNames.slice(0, 5)).toEqual(['input_ids', 'attention_mask', 'position_ids', 'past_key_values.0.key', 'past_key_values.0.value'])
    expect(model.session.outputNames.slice(0, 3)).toEqual(['logits', 'present.0.key', 'present.0.value'])
  })

  it('returns present caches of shape [B, H_kv, P+S, D]', async () => {
    const first = await model.step({ ids: [[1, 2, 3]], mask: [[1, 1, 1]], positions: [[0, 1, 2]] })
    expect(first.present['past_key_values.0.key'].dims).toEqual([1, model.shape.kvHeads, 3, model.shape.headDim])
    const next = await model.step({ ids: [[4]], mask: [[1, 1, 1, 1]], positions: [[3]], past: first.present })
    expect(next.present['past_key_values.3.value'].dims).toEqual([1, model.shape.kvHeads, 4, model.shape.headDim])
    expect(next.logits.length).toBe(model.shape.vocabSize)
  })

  it('chunked prefill matches one-shot prefill', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => (i * 53 + 17) % 500)
    const whole = await model.step({ ids: [ids], mask: [ones(20)], positions: [range(0, 20)] })
    const head = await model.step({ ids: [ids.slice(0, 8)], mask: [ones(8)], positions: [range(0, 8)] })
    const tail = await model.step({ ids: [ids.slice(8)], mask: [ones(20)], positions: [range(8, 20)], past: head.present })
    for (let pos = 0; pos < 12; pos++) {
      expect(maxAbsDiff(model.logitsAt(tail, 0, pos, 12), model.logitsAt(whole, 0, 8 + pos, 20))).toBeLessThanOrEqual(TOLERANCE)
    }
  })

  it('left-padded batching matches each prompt alone, at prefill and over decode steps', async () => {
    const width = Math.max(...PROMPTS.map((p) => p.length))
    const batchMask = PROMPTS.map((p) => [...zeros(width - p.length), ...ones(p.length)])
    let batch = await model.step({ ids: leftPad(PROMPTS, width), mask: batchMask, positions: batchMask.map(positionsFromMask) })
    let batchSeq = width
    const alone = await Promise.all(PROMPTS.map((p) => model.step({ ids: [p], mask: [ones(p.length)], positions: [range(0, p.length)] })))
    const aloneSeq = PROMPTS.map((p) => p.length)
    const aloneCache: KvCache[] = alone.map((a) => a.present)
    let aloneLast = alone.map((a, r) => model.logitsAt(a, 0, aloneSeq[r] - 1, aloneSeq[r]))

    for (let step = 0; step < 5; step++) {
      PROMPTS.forEach((_, r) => expect(maxAbsDiff(model.logitsAt(batch, r, batchSeq - 1, batchSeq), aloneLast[r])).toBeLessThanOrEqual(TOLERANCE))
      // Feed the same greedy token to both paths; positions continue from each row's real length.
      const next = aloneLast.map(argmax)
      const lengths = PROMPTS.map((p) => p.length + step)
      batchMask.forEach((m) => m.push(1))
      batch = await model.step({ ids: next.map((t) => [t]), mask: batchMask, positions: lengths.map((n) => [n]), past: batch.present })
      batchSeq = 1
      const stepped = await Promise.all(next.map((t, r) => model.step({ ids: [[t]], mask: [ones(lengths[r] + 1)], positions: [[lengths[r]]], past: aloneCache[r] })))
      stepped.forEach((s, r) => (aloneCache[r] = s.present))
      aloneLast = stepped.map((s) => model.logitsAt(s, 0, 0, 1))
    }
  })

  it('wrong position_ids change the logits measurably (the batching test can fail)', async () => {
    const width = Math.max(...PROMPTS.map((p) => p.length))
    const mask = PROMPTS.map((p) => [...zeros(width - p.length), ...ones(p.length)])
    const short = PROMPTS[0]
    const alone = await model.step({ ids: [short], mask: [ones(short.length)], positions: [range(0, short.length)] })
    const expected = model.logitsAt(alone, 0, short.length - 1, short.length)
    // GPT-2's learned absolute positions break with buffer-index positions. RoPE only sees
    // position differences, so a uniform shift is harmless there; a runner that never advances
    // positions (all zero) breaks it.
    const wrong = preset === 'tiny' ? mask.map(() => range(0, width)) : mask.map(() => zeros(width))
    const out = await model.step({ ids: leftPad(PROMPTS, width), mask, positions: wrong })
    expect(maxAbsDiff(model.logitsAt(out, 0, width - 1, width), expected)).toBeGreaterThan(0.05)
  })

  it('greedy decoding stays finite and varied for 64 steps, with logits of healthy spread', async () => {
    const prompt = [72, 101, 108, 108, 111]
    let out = await model.step({ ids: [prompt], mask: [ones(prompt.length)], positions: [range(0, prompt.length)] })
    let logits = model.logitsAt(out, 0, prompt.length - 1, prompt.length)
    const tokens: number[] = []
    const spreads: number[] = []
    for (let step = 0; step < 64; step++) {
      expect(logits.every(Number.isFinite)).toBe(true)
      spreads.push(std(logits))
      tokens.push(argmax(logits))
      const length = prompt.length + step
      out = await model.step({ ids: [[tokens[step]]], mask: [ones(length + 1)], positions: [[length]], past: out.present })
      logits = model.logitsAt(out, 0, 0, 1)
    }
    expect(new Set(tokens).size).toBeGreaterThan(8)
    const meanSpread = spreads.reduce((a, b) => a + b, 0) / spreads.length
    expect(meanSpread).toBeGreaterThan(2)
    expect(meanSpread).toBeLessThan(6)
  })
})

/**
 * tiny-qwen2 is tiny-llama (same seed, same tensor names, so the same weights) plus Qwen2's q/k/v
 * biases: tiny-llama's logits are what a runtime that dropped the biases would compute.
 */
describe('Qwen2 q/k/v biases (tiny-qwen2 against tiny-llama)', () => {
  const root = mkdtempSync(join(tmpdir(), 'zerolayer-qwen2-bias-'))
  afterAll(() => rmSync(root, { recursive: true, force: true }))

  it('change the logits measurably at every position', async () => {
    const models: DecoderHarness[] = []
    for (const preset of ['tiny-llama', 'tiny-qwen2'] as const) {
      await generateModel({ preset, outDir: join(root, preset), seed: 42, kvCache: 'concat' })
      models.push(await DecoderHarness.open(join(root, preset)))
    }
    const [llama, qwen2] = models as [DecoderHarness, DecoderHarness]
    try {
      const ids = PROMPTS[1]
      const input = { ids: [ids], mask: [ones(ids.length)], positions: [range(0, ids.length)] }
      const [without, withBias] = [await llama.step(input), await qwen2.step(input)]
      const diffs = ids.map((_, pos) => maxAbsDiff(llama.logitsAt(without, 0, pos, ids.length), qwen2.logitsAt(withBias, 0, pos, ids.length)))
      // Logits have std ~4 over the vocabulary; a dropped bias moves some by more than 1 everywhere.
      expect(Math.min(...diffs)).toBeGreaterThan(1)
    } finally {
      for (const m of models) await m.close()
    }
  })
})

function ones(n: number): number[] {
  return new Array<number>(n).fill(1)
}

function zeros(n: number): number[] {
  return new Array<number>(n).fill(0)
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i)
}

function leftPad(rows: number[][], width: number): number[][] {
  return rows.map((r) => [...zeros(width - r.length), ...r])
}

/** cumsum(mask) - 1 for real tokens, PAD_POSITION for pads. */
function positionsFromMask(mask: number[]): number[] {
  let seen = 0
  return mask.map((m) => (m === 1 ? seen++ : PAD_POSITION))
}
