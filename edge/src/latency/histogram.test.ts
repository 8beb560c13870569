import { describe, expect, it } from 'vitest'
import { seededRandom as rng } from '../../../shared/test/support/seeded-random.ts'
import { BUCKET_COUNT, bucketBounds, bucketIndex, emptyHistogram, GROWTH, LAST_FINITE, MAX_MS, mergeInto, observe, OVERFLOW, percentile, totalCount } from './histogram.ts'

/** Latency-like samples: log-uniform from 0.1 ms to ~200 s, with a few exact bucket bounds. */
function sample(rand: () => number): number {
  const r = rand()
  if (r < 0.05) return bucketBounds(1 + Math.floor(rand() * LAST_FINITE)).lowerMs
  return 10 ** (-1 + rand() * 6.3)
}

/** The nearest-rank quantile of the raw samples. */
function exactQuantile(sorted: number[], q: number): number {
  return sorted[Math.max(1, Math.ceil(q * sorted.length)) - 1]!
}

describe('bucket bounds', () => {
  it('spans 1 ms to beyond 120 s in buckets 10% wide', () => {
    expect(bucketBounds(1)).toEqual({ lowerMs: 1, upperMs: GROWTH })
    expect(bucketBounds(LAST_FINITE).upperMs).toBeGreaterThanOrEqual(MAX_MS)
    expect(bucketBounds(LAST_FINITE).lowerMs).toBeLessThan(MAX_MS)
    expect(bucketBounds(OVERFLOW).upperMs).toBe(Infinity)
    expect(BUCKET_COUNT).toBe(OVERFLOW + 1)
    for (let i = 2; i <= LAST_FINITE; i++) {
      const { lowerMs, upperMs } = bucketBounds(i)
      expect(upperMs / lowerMs).toBeCloseTo(GROWTH, 9)
      expect(bucketBounds(i - 1).upperMs).toBe(lowerMs)
    }
  })

  it('puts every value in the bucket whose bounds hold it, including values on a bound', () => {
    const rand = rng(1)
    for (let k = 0; k < 20_000; k++) {
      const ms = sample(rand)
      const i = bucketIndex(ms)
      const { lowerMs, upperMs } = bucketBounds(i)
      expect(ms >= lowerMs && ms < upperMs, `${ms} in bucket ${i} [${lowerMs}, ${upperMs})`).toBe(true)
    }
    for (let i = 1; i <= OVERFLOW; i++) expect(bucketIndex(bucketBounds(i).lowerMs)).toBe(i)
  })

  it('counts negative, NaN and sub-millisecond values in bucket 0 and huge ones in overflow', () => {
    expect([-5, Number.NaN, 0, 0.999].map(bucketIndex)).toEqual([0, 0, 0, 0])
    expect(bucketIndex(1e9)).toBe(OVERFLOW)
    expect(bucketIndex(Infinity)).toBe(OVERFLOW)
  })
})

describe('percentiles from buckets', () => {
  it('is undefined for an empty histogram', () => {
    expect(percentile(emptyHistogram(), 0.5)).toBeUndefined()
  })

  it('stays in the exact percentile’s bucket: error under one bucket width (property, 200 random sets)', () => {
    const rand = rng(42)
    for (let trial = 0; trial < 200; trial++) {
      const n = 1 + Math.floor(rand() * 500)
      const values = Array.from({ length: n }, () => sample(rand))
      const h = emptyHistogram()
      for (const v of values) observe(h, v)
      const sorted = [...values].sort((a, b) => a - b)
      for (const q of [0.5, 0.9, 0.95, 0.99, 1]) {
        const exact = exactQuantile(sorted, q)
        const estimate = percentile(h, q)!
        const i = bucketIndex(exact)
        const { lowerMs, upperMs } = bucketBounds(i)
        expect(estimate, `q=${q} n=${n} exact=${exact}`).toBeGreaterThanOrEqual(lowerMs)
        if (i !== OVERFLOW) {
          expect(estimate).toBeLessThan(upperMs)
          // The width bound the dashboard promises: < 10% relative, or < 1 ms under 1 ms.
          expect(Math.abs(estimate - exact)).toBeLessThan(Math.max(exact * (GROWTH - 1), 1))
        }
      }
    }
  })

  it('merges by adding counts: percentiles of merged parts equal those of the whole', () => {
    const rand = rng(7)
    for (let trial = 0; trial < 50; trial++) {
      const whole = emptyHistogram()
      const merged = emptyHistogram()
      const parts = 1 + Math.floor(rand() * 8)
      for (let p = 0; p < parts; p++) {
        const part = emptyHistogram()
        for (let k = Math.floor(rand() * 100); k > 0; k--) {
          const v = sample(rand)
          observe(part, v)
          observe(whole, v)
        }
        mergeInto(merged, part)
      }
      expect(merged).toEqual(whole)
      expect(totalCount(merged)).toBe(totalCount(whole))
      for (const q of [0.5, 0.95, 0.99]) expect(percentile(merged, q)).toBe(percentile(whole, q))
    }
  })

  it('is monotone in q', () => {
    const rand = rng(9)
    const h = emptyHistogram()
    for (let k = 0; k < 1000; k++) observe(h, sample(rand))
    const qs = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1]
    const ps = qs.map((q) => percentile(h, q)!)
    for (let k = 1; k < ps.length; k++) expect(ps[k]).toBeGreaterThanOrEqual(ps[k - 1]!)
  })
})
