/**
 * Finds stop strings in streamed text, including ones split across tokens, and never lets text
 * out that a stop string may still swallow: the longest tail that is a prefix of some stop
 * string is held back until the next delta decides it.
 */
export class StopChecker {
  private held = ''
  private readonly maxStopLen: number

  constructor(private readonly stops: readonly string[]) {
    this.maxStopLen = stops.reduce((m, s) => Math.max(m, s.length), 0)
  }

  /** Feeds a text delta; returns the text safe to emit and, when a stop string matched, which. */
  push(delta: string): { emit: string; stopped?: string } {
    if (this.stops.length === 0) return { emit: delta }
    const text = this.held + delta
    let cut = -1
    let stopped: string | undefined
    for (const stop of this.stops) {
      const at = text.indexOf(stop)
      if (at !== -1 && (cut === -1 || at < cut)) {
        cut = at
        stopped = stop
      }
    }
    if (stopped !== undefined) {
      this.held = ''
      return { emit: text.slice(0, cut), stopped }
    }
    const keep = this.partialStopSuffix(text)
    this.held = text.slice(text.length - keep)
    return { emit: text.slice(0, text.length - keep) }
  }

  /** Releases held text when generation ends for another reason. */
  flush(): string {
    const out = this.held
    this.held = ''
    return out
  }

  /** Length of the longest suffix of `text` that is a proper prefix of a stop string. */
  private partialStopSuffix(text: string): number {
    for (let len = Math.min(this.maxStopLen - 1, text.length); len > 0; len--) {
      const tail = text.slice(text.length - len)
      if (this.stops.some((s) => s.startsWith(tail))) return len
    }
    return 0
  }
}
