/**
 * Per-request timing, from arrival to finish: feeds the TTFT / inter-token / e2e histograms and
 * the token and outcome counters, and gives the request log its ttftMs and durationMs.
 */
import type { FinishReason, Usage } from '../engine/types.ts'
import type { NodeMetrics } from './node-metrics.ts'

/** Finish reasons that count as success; `abort` and `error` are failures. */
const SUCCESS_REASONS: ReadonlySet<FinishReason> = new Set(['stop', 'length', 'stop_sequence'])

export class RequestTimer {
  private readonly startMs: number
  private firstTokenMs?: number
  private lastTokenMs?: number
  private lastTokens = 0
  private settled = false

  constructor(
    private readonly metrics: NodeMetrics | undefined,
    private readonly now: () => number = performance.now.bind(performance),
  ) {
    this.startMs = now()
  }

  /** A text event arrived; `completionTokens` is the cumulative count so far. */
  onText(completionTokens: number): void {
    const t = this.now()
    if (this.firstTokenMs === undefined) {
      this.firstTokenMs = t
      this.metrics?.timeToFirstToken.observe((t - this.startMs) / 1000)
    } else if (this.lastTokenMs !== undefined) {
      // One event may carry several tokens (incremental detokenizing): spread the gap over them.
      const tokens = Math.max(1, completionTokens - this.lastTokens)
      const perTokenS = (t - this.lastTokenMs) / 1000 / tokens
      for (let i = 0; i < Math.min(tokens, 64); i++) this.metrics?.interTokenLatency.observe(perTokenS)
    }
    this.lastTokenMs = t
    this.lastTokens = completionTokens
  }

  /** The engine finished the request normally (or with `error`/`abort`, counted as failure with `code`). */
  finish(reason: FinishReason, usage: Usage, failureCode?: string): void {
    if (this.settled) return
    this.settled = true
    const m = this.metrics
    if (!m) return
    m.e2eRequestLatency.observe(this.durationMs() / 1000)
    m.promptTokens.inc(usage.promptTokens)
    m.generationTokens.inc(usage.completionTokens)
    if (SUCCESS_REASONS.has(reason)) m.requestSuccess.inc({ finished_reason: reason })
    else m.requestFailure.inc({ reason: failureCode ?? (reason === 'abort' ? 'aborted' : 'internal') })
  }

  /** The request failed before or outside the engine (validation, overload, client gone). */
  fail(code: string): void {
    if (this.settled) return
    this.settled = true
    this.metrics?.requestFailure.inc({ reason: code })
  }

  ttftMs(): number | undefined {
    return this.firstTokenMs === undefined ? undefined : round(this.firstTokenMs - this.startMs)
  }

  durationMs(): number {
    return round(this.now() - this.startMs)
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000
