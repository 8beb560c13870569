/** The statistics every benchmark figure goes through. */
import { describe, expect, it } from 'vitest'
import { leastSquaresSlope, median, percentile, poissonArrivals, round, slopeOverLast, summarize } from './stats.ts'

describe('bench statistics', () => {
  it('interpolates percentiles between closest ranks, as numpy does by default', () => {
    const xs = [15, 20, 35, 40, 50]
    // numpy.percentile([15, 20, 35, 40, 50], [0, 25, 40, 50, 99, 100])
    expect([0, 25, 40, 50, 99, 100].map((p) => round(percentile(xs, p), 6))).toEqual([15, 20, 29, 35, 49.6, 50])
    expect(median([3, 1, 2, 10])).toBe(2.5)
    expect(percentile([7], 99)).toBe(7)
    expect(percentile([], 50)).toBeNaN()
  })

  it('leaves its input unsorted', () => {
    const xs = [3, 1, 2]
    percentile(xs, 50)
    expect(xs).toEqual([3, 1, 2])
  })

  it('summarises a sample', () => {
    const s = summarize(Array.from({ length: 101 }, (_, i) => i))
    expect(s).toEqual({ n: 101, p50: 50, p90: 90, p99: 99, max: 100, mean: 50 })
  })

  it('draws Poisson arrivals at the asked rate, the same for the same seed', () => {
    const a = poissonArrivals(50, 20_000, 7)
    expect(poissonArrivals(50, 20_000, 7)).toEqual(a)
    expect(poissonArrivals(50, 20_000, 8)).not.toEqual(a)
    expect(a[0]).toBe(0)
    for (let i = 1; i < a.length; i++) expect(a[i]).toBeGreaterThanOrEqual(a[i - 1]!)
    // 20 000 arrivals at 50/s span ~400 s; exponential gaps have mean 20 ms and CV 1.
    const gaps = a.slice(1).map((t, i) => t - a[i]!)
    const mean = gaps.reduce((s, g) => s + g, 0) / gaps.length
    const sd = Math.sqrt(gaps.reduce((s, g) => s + (g - mean) ** 2, 0) / gaps.length)
    expect(mean).toBeGreaterThan(19)
    expect(mean).toBeLessThan(21)
    expect(sd / mean).toBeGreaterThan(0.95)
    expect(sd / mean).toBeLessThan(1.05)
  })

  it('fits a least-squares slope, leaving out points it cannot place', () => {
    // y = 2x + 1 plus noise (+½, −½, −½, +½) that no line through the points can follow: slope 2.
    expect(leastSquaresSlope([[0, 1.5], [1, 2.5], [2, 4.5], [3, 7.5]])).toBeCloseTo(2, 12)
    expect(leastSquaresSlope([[0, 5], [10, 5], [20, 5]])).toBe(0)
    expect(leastSquaresSlope([[0, 1], [1, NaN], [2, 5]])).toBe(2)
    expect(leastSquaresSlope([[3, 1], [3, 2]])).toBeNaN()
    expect(leastSquaresSlope([])).toBeNaN()
  })

  it("takes the slope over a run's last window only: a rise that levelled off reads 0", () => {
    // RSS samples every 5 s over a 90 s run (timers a little late): rising 2 MiB/s for 30 s, then
    // flat; a sample after the run (its drain) rose again and is not part of it.
    const samples = Array.from({ length: 19 }, (_, i) => [i * 5 + 0.1, 200 + 2 * Math.min(i * 5, 30)] as const)
    const points = [...samples, [120, 400] as const]
    expect(slopeOverLast(points, 90, 60)).toBeCloseTo(0, 9)
    // The same window over a run that never levelled off: its rate.
    const rising = Array.from({ length: 19 }, (_, i) => [i * 5, 100 + i * 5] as const)
    expect(slopeOverLast(rising, 90, 60)).toBeCloseTo(1, 9)
    // 13 samples fall in the last minute of a 90 s run sampled every 5 s.
    expect(samples.filter(([x]) => x >= 30 - 0.5 && x <= 90 + 0.5)).toHaveLength(13)
  })
})
