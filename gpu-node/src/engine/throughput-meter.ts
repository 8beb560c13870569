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
   * Tokens per second over the span actually observed (at most the window): right after a node
   * becomes busy, dividing by the whole window would understate the rate several times over.
   */
  rate(nowMs: number): number {
    this.prune(nowMs)
    let total = 0
    let oldest = Infinity
    for (const [b, n] of this.buckets) {
      total += n
      oldest = Math.min(oldest, b)
    }
    if (total === 0) return 0
    const spanMs = Math.min(this.windowMs, Math.max(100, nowMs - oldest * 100))
    return (total * 1000) / spanMs
  }

  private prune(nowMs: number): void {
    const oldest = Math.floor((nowMs - this.windowMs) / 100)
    for (const b of this.buckets.keys()) if (b <= oldest) this.buckets.delete(b)
  }
}
