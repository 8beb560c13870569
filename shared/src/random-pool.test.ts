import { describe, expect, it } from 'vitest'
import { randomHex, randomUint32 } from './random-pool.ts'

describe('random pool', () => {
  it('draws unsigned 32-bit integers across refills of the pool, every bit used', () => {
    // 3000 draws of 4 bytes cross the 4 KiB pool's refill twice, with hex draws in between.
    const values: number[] = []
    for (let i = 0; i < 3000; i++) {
      values.push(randomUint32())
      if (i % 100 === 0) expect(randomHex(8)).toMatch(/^[0-9a-f]{16}$/)
    }
    for (const v of values) expect(Number.isInteger(v) && v >= 0 && v < 2 ** 32).toBe(true)
    // Distinct but for a chance collision or two (3000 draws of 2^32: ~0.001 expected).
    expect(new Set(values).size).toBeGreaterThanOrEqual(2998)
    // Each bit is set in about half the draws (binomial sd ~27 of 1500): the top one too, so the
    // result is unsigned, and the low ones, so every byte is placed.
    for (let bit = 0; bit < 32; bit++) {
      const set = values.filter((v) => Math.floor(v / 2 ** bit) % 2 === 1).length
      expect(set).toBeGreaterThan(1300)
      expect(set).toBeLessThan(1700)
    }
  })
})
