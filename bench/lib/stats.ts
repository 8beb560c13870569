/**
 * Small, dependency-free statistics for the benchmark: percentiles by linear interpolation
 * between closest ranks (the same definition numpy uses by default), medians over rounds, and a
 * compact summary of a sample.
 */
import { seededRandom } from '../../shared/test/support/seeded-random.ts'

/** The p-th percentile (0..100) of `values`; NaN for an empty sample. Does not modify the input. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  if (sorted.length === 1) return sorted[0]
  const rank = (Math.min(100, Math.max(0, p)) / 100) * (sorted.length - 1)
  const lo = Math.floor(rank)
  const hi = Math.ceil(rank)
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo)
}

export const median = (values: readonly number[]): number => percentile(values, 50)

export function mean(values: readonly number[]): number {
  if (values.length === 0) return NaN
  let s = 0
  for (const v of values) s += v
  return s / values.length
}

export interface Summary {
  n: number
  p50: number
  p90: number
  p99: number
  max: number
  mean: number
}

export function summarize(values: readonly number[]): Summary {
  return {
    n: values.length,
    p50: round(percentile(values, 50)),
    p90: round(percentile(values, 90)),
    p99: round(percentile(values, 99)),
    max: round(values.length ? Math.max(...values) : NaN),
    mean: round(mean(values)),
  }
}

/** Rounds to `digits` significant decimals for reports (keeps NaN/null as null in JSON). */
export function round(x: number, digits = 3): number {
  if (!Number.isFinite(x)) return x
  const f = 10 ** digits
  return Math.round(x * f) / f
}

/** Arrival offsets (ms) of a Poisson process at `ratePerS`: exponential gaps, first arrival at 0. */
export function poissonArrivals(ratePerS: number, count: number, seed: number): number[] {
  const rand = seededRandom(seed)
  const out: number[] = []
  let t = 0
  for (let i = 0; i < count; i++) {
    out.push(t)
    t += (-Math.log(1 - rand()) / ratePerS) * 1000
  }
  return out
}

/**
 * The least-squares slope of y over x (y units per x unit) through `points`; points with a
 * non-finite coordinate are left out; NaN with fewer than two distinct x.
 */
export function leastSquaresSlope(points: ReadonlyArray<readonly [x: number, y: number]>): number {
  const xs: number[] = []
  const ys: number[] = []
  for (const [x, y] of points) {
    if (Number.isFinite(x) && Number.isFinite(y)) {
      xs.push(x)
      ys.push(y)
    }
  }
  const mx = mean(xs)
  const my = mean(ys)
  let sxy = 0
  let sxx = 0
  for (let i = 0; i < xs.length; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my)
    sxx += (xs[i]! - mx) ** 2
  }
  return sxx === 0 ? NaN : sxy / sxx
}

/**
 * The least-squares slope of the points whose x lies in the window [endX - windowX, endX] (half a
 * unit of slack either side, for sampling timers that fire late): how fast y still moved at the
 * end of a run, whatever it did before or after.
 */
export function slopeOverLast(points: ReadonlyArray<readonly [x: number, y: number]>, endX: number, windowX: number): number {
  return leastSquaresSlope(points.filter(([x]) => x >= endX - windowX - 0.5 && x <= endX + 0.5))
}
