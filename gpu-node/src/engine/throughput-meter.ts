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

  rate(nowMs: number): number {
    this.prune(nowMs)
    let total = 0
    for (const n of this.buckets.values()) total += n
    return (total * 1000) / this.windowMs
  }

  private prune(nowMs: number): void {
    const oldest = Math.floor((nowMs - this.windowMs) / 100)
    for (const b of this.buckets.keys()) if (b <= oldest) this.buckets.delete(b)
  }
}
