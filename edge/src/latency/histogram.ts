/**
 * Latency histograms with FIXED log-spaced buckets, the same on every edge and in every minute,
 * so histograms merge by adding counts and percentiles come from the merged counts.
 *
 * Buckets (ms): 0 holds [0, 1); bucket i in 1..LAST_FINITE holds [GROWTH^(i-1), GROWTH^i), the
 * last finite one ending just above MAX_MS (120 s); OVERFLOW holds everything from there on.
 * Each finite bucket spans 10%, so a percentile read from the merged counts lies in the same
 * bucket as the exact one: relative error < 10% at ≥ 1 ms, absolute error < 1 ms below.
 */

/** Upper bound over lower bound of every finite bucket above 1 ms. */
export const GROWTH = 1.1
/** The largest latency the finite buckets resolve, ms. */
export const MAX_MS = 120_000
/** Index of the last finite bucket: its upper bound is the first power of GROWTH ≥ MAX_MS. */
export const LAST_FINITE = Math.ceil(Math.log(MAX_MS) / Math.log(GROWTH))
/** Index of the bucket for ≥ GROWTH^LAST_FINITE ms (≈ 123 s). */
export const OVERFLOW = LAST_FINITE + 1
export const BUCKET_COUNT = OVERFLOW + 1

/** UPPER_MS[i] is bucket i's exclusive upper bound (Infinity for OVERFLOW). */
const UPPER_MS: readonly number[] = Array.from({ length: BUCKET_COUNT }, (_, i) => (i === OVERFLOW ? Infinity : GROWTH ** i))

/** Counts per bucket index; always BUCKET_COUNT long. */
export type Histogram = number[]

export function emptyHistogram(): Histogram {
  return new Array<number>(BUCKET_COUNT).fill(0)
}

/** The bucket a latency (ms) falls in; negative or NaN counts as 0 ms. */
export function bucketIndex(ms: number): number {
  if (!(ms >= 1)) return 0
  if (ms >= UPPER_MS[LAST_FINITE]!) return OVERFLOW
  // The log gives the index up to float error at the bounds; the table settles it.
  let i = Math.min(LAST_FINITE, Math.max(1, Math.floor(Math.log(ms) / Math.log(GROWTH)) + 1))
  while (i > 1 && ms < UPPER_MS[i - 1]!) i--
  while (ms >= UPPER_MS[i]!) i++
  return i
}

/** [lower, upper) of bucket i, ms. */
export function bucketBounds(i: number): { lowerMs: number; upperMs: number } {
  return { lowerMs: i === 0 ? 0 : UPPER_MS[i - 1]!, upperMs: UPPER_MS[i]! }
}

export function observe(h: Histogram, ms: number, count = 1): void {
  h[bucketIndex(ms)]! += count
}

/** Adds `source`'s counts into `target`. */
export function mergeInto(target: Histogram, source: Histogram): Histogram {
  for (let i = 0; i < BUCKET_COUNT; i++) target[i]! += source[i]!
  return target
}

export function totalCount(h: Histogram): number {
  let n = 0
  for (const c of h) n += c
  return n
}

/**
 * The q-quantile (0 < q ≤ 1) by nearest rank (the ceil(q·n)-th smallest sample), estimated
 * inside that sample's bucket by geometric interpolation over the bucket's samples; undefined
 * for an empty histogram. An overflow sample reads as the overflow bucket's lower bound.
 */
export function percentile(h: Histogram, q: number): number | undefined {
  const n = totalCount(h)
  if (n === 0) return undefined
  const rank = Math.max(1, Math.ceil(q * n))
  let before = 0
  for (let i = 0; i < BUCKET_COUNT; i++) {
    const c = h[i]!
    if (c === 0 || before + c < rank) {
      before += c
      continue
    }
    const { lowerMs, upperMs } = bucketBounds(i)
    if (i === OVERFLOW) return lowerMs
    /** Where the rank sits among this bucket's samples, strictly inside (0, 1). */
    const f = (rank - before - 0.5) / c
    return i === 0 ? f * upperMs : lowerMs * (upperMs / lowerMs) ** f
  }
  return undefined // unreachable: rank ≤ n
}
