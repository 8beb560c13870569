/** Tokens per second over a sliding window, in buckets of 100 ms. */
export class ThroughputMeter {
  private readonly buckets = new Map<number, number>()

  constructor(private readonly windowMs: number) {}

  add(nowMs: number, tokens: number): void {
    if (tokens === 0) return
    const b = Math.floor(nowMs / 100)
    this.buckets.set(b, (this.buckets.get(b) ?? 0) + tokens)
    if (this.buckets.size > this.windowMs / 50) this.prune(nowMs)
  }

  /**
   * Tokens per second over the span actually observed (at most the window, or the last `overMs`
   * of it): right after a node becomes busy, dividing by the whole window would understate the
   * rate several times over.
   */
  rate(nowMs: number, overMs = this.windowMs): number {
    this.prune(nowMs)
    const since = Math.floor((nowMs - overMs) / 100)
    let total = 0
    let oldest = Infinity
    for (const [b, n] of this.buckets) {
      if (b <= since) continue
      total += n
      oldest = Math.min(oldest, b)
    }
    if (total === 0) return 0
    const spanMs = Math.min(overMs, Math.max(100, nowMs - oldest * 100))
    return (total * 1000) / spanMs
  }

  private prune(nowMs: number): void {
    const oldest = Math.floor((nowMs - this.windowMs) / 100)
    for (const b of this.buckets.keys()) if (b <= oldest) this.buckets.delete(b)
  }
}
