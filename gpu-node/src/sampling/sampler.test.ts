import { describe, expect, it } from 'vitest'
import { argmax, SequenceSampler, topIndices, uniform } from './sampler.ts'
import { GREEDY, type SamplingParams } from '../../../shared/src/generation.ts'

const params = (over: Partial<SamplingParams>): SamplingParams => ({ ...GREEDY, ...over })
const logits = (...v: number[]) => Float32Array.from(v)

function histogram(p: SamplingParams, base: Float32Array, n = 4000): number[] {
  const counts = new Array(base.length).fill(0)
  for (let i = 0; i < n; i++) {
    const s = new SequenceSampler({ ...p, seed: i }, [], 0)
    counts[s.sample(base.slice())]++
  }
  return counts
}

describe('SequenceSampler', () => {
  it('is greedy at temperature 0', () => {
    expect(new SequenceSampler(GREEDY, [], 0).sample(logits(0.1, 3, 2))).toBe(1)
  })

  it('draws the same tokens for the same seed, whatever else ran before', () => {
    const p = params({ temperature: 1, seed: 42 })
    const draw = () => {
      const s = new SequenceSampler(p, [], 0)
      return Array.from({ length: 20 }, () => s.sample(logits(1, 1.2, 0.8, 1.1, 0.9)))
    }
    expect(draw()).toEqual(draw())
    expect(new Set(draw()).size).toBeGreaterThan(1)
  })

  it('continues a seeded stream identically after recompute from its tokens', () => {
    const p = params({ temperature: 1, seed: 9 })
    const full = new SequenceSampler(p, [1, 2], 2)
    const seqTokens = [1, 2]
    for (let i = 0; i < 10; i++) seqTokens.push(full.sample(logits(1, 1, 1, 1, 1)))
    const resumed = new SequenceSampler(p, seqTokens.slice(0, 7), 2)
    const rest = Array.from({ length: 5 }, () => resumed.sample(logits(1, 1, 1, 1, 1)))
    expect(rest).toEqual(seqTokens.slice(7))
  })

  it('samples in proportion to softmax(logits / T)', () => {
    const counts = histogram(params({ temperature: 1 }), logits(Math.log(1), Math.log(3)))
    expect(counts[1] / 4000).toBeGreaterThan(0.7)
    expect(counts[1] / 4000).toBeLessThan(0.8)
  })

  it('keeps only the k most likely tokens with top_k', () => {
    const counts = histogram(params({ temperature: 1, topK: 2 }), logits(0, 1, 2, 1.9))
    expect(counts[0] + counts[1]).toBe(0)
    expect(counts[2]).toBeGreaterThan(0)
    expect(counts[3]).toBeGreaterThan(0)
  })

  it('keeps the smallest nucleus with top_p', () => {
    // probs ≈ 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps the first two.
    const counts = histogram(params({ temperature: 1, topP: 0.8 }), logits(3, 2, 1, 0))
    expect(counts[2] + counts[3]).toBe(0)
    expect(counts[1]).toBeGreaterThan(0)
  })

  it('drops tokens below min_p × the top probability', () => {
    const counts = histogram(params({ temperature: 1, minP: 0.3 }), logits(3, 2, 1, 0))
    expect(counts[2] + counts[3]).toBe(0)
    expect(counts[1]).toBeGreaterThan(0)
  })

  it('applies presence and frequency penalties to generated tokens only', () => {
    const s = new SequenceSampler(params({ presencePenalty: 1, frequencyPenalty: 1 }), [0, 1, 1], 1)
    // token 1 was generated twice: 5 - (1 + 2) = 2 < 2.5; token 0 is prompt-only: untouched.
    expect(s.sample(logits(2.4, 5, 2.5))).toBe(2)
  })

  it('applies the repetition penalty to prompt and output alike', () => {
    const s = new SequenceSampler(params({ repetitionPenalty: 2 }), [0], 1)
    expect(s.sample(logits(3, 2))).toBe(1)
  })

  it('never samples a banned token (ignore_eos)', () => {
    expect(new SequenceSampler(GREEDY, [], 0, [1]).sample(logits(0, 9, 1))).toBe(2)
  })

  it('argmax: the first largest, NaN never wins, a max in the tail past the last group of 4', () => {
    expect(argmax(Float32Array.from([1, 5, 2, 5, 5]))).toBe(1)
    expect(argmax(Float32Array.from([NaN, 1, NaN, 3, 2]))).toBe(3)
    expect(argmax(Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7, 9]))).toBe(8)
    expect(argmax(Float32Array.from([-Infinity, -Infinity, -Infinity]))).toBe(0)
    expect(argmax(Float32Array.from([-Infinity, -Infinity, -1e30]))).toBe(2)
    expect(argmax(new Float32Array(0))).toBe(0)
  })

  it('finds top indices without sorting the whole vocabulary', () => {
    const v = Float32Array.from({ length: 32000 }, (_, i) => Math.sin(i))
    const top = topIndices(v, 5)
    const ref = Array.from(v.keys()).sort((a, b) => v[b] - v[a]).slice(0, 5)
    expect(top).toEqual(ref)
    expect(argmax(v)).toBe(ref[0])
    expect(uniform(1, 2)).toBe(uniform(1, 2))
  })
})
