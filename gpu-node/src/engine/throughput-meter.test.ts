import { describe, expect, it } from 'vitest'
import { ThroughputMeter } from './throughput-meter.ts'

describe('ThroughputMeter', () => {
  it('measures over the observed span right after work starts, not the whole window', () => {
    const m = new ThroughputMeter(5000)
    m.add(10_000, 50)
    m.add(10_500, 50)
    expect(m.rate(11_000)).toBeCloseTo(100, 0)
  })

  it('forgets tokens older than the window', () => {
    const m = new ThroughputMeter(5000)
    m.add(0, 1000)
    m.add(6000, 10)
    expect(m.rate(6000)).toBe(100)
    expect(m.rate(20_000)).toBe(0)
  })
})
