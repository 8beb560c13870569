import { describe, expect, it } from 'vitest'
import { ThroughputMeter } from './throughput-meter.ts'

describe('ThroughputMeter', () => {
  it('measures over the observed span right after work starts, not the whole window', () => {
    const m = new ThroughputMeter(5000)
    m.add(10_000, 50)
    m.add(10_500, 50)
    expect(m.rate(11_000)).toBeCloseTo(100, 0)
  })

  it('measures over the last part of the window when asked', () => {
    const m = new ThroughputMeter(5000)
    m.add(11_000, 1000)
    m.add(14_500, 50)
    expect(m.rate(15_000)).toBeCloseTo(262.5, 0)
    expect(m.rate(15_000, 1000)).toBeCloseTo(100, 0)
  })

  it('forgets tokens older than the window', () => {
    const m = new ThroughputMeter(5000)
    m.add(0, 1000)
    m.add(6000, 10)
    expect(m.rate(6000)).toBe(100)
    expect(m.rate(20_000)).toBe(0)
  })
})
