import { performance } from 'node:perf_hooks'
import type { StepPlan, StepResult } from '../model/runner.ts'
import type { Sequence } from './sequence.ts'
import { ThroughputMeter } from './throughput-meter.ts'
import type { EngineObserver } from './types.ts'

/**
 * Everything the engine measures about its steps, in one place so the step loop stays plain:
 * model time and rows (the observer's onStep), the token rate behind stats() and wait
 * estimates, the batch KV left resident, and how many steps an abort took to free its KV.
 */
export class StepMetrics {
  /** Rows and tokens resident in the runner's batch KV after the last step. */
  kvRows = 0
  kvTokens = 0
  /** Completed steps (tests count steps with it). */
  steps = 0
  private started = 0
  /** Prompt tokens per second of model time in prefill runs, smoothed; 0 until a prefill ran. */
  prefillTokPerSec = 0
  private readonly meter = new ThroughputMeter(5000)
  /** Request id → steps started when abort() was called. */
  private readonly abortedAt = new Map<string, number>()
  /** Aborted sequences whose KV release rides on a coming plan: seqId → (id, steps started at abort). */
  private readonly freeing = new Map<number, { id: string; abortedAt: number }>()

  constructor(
    private readonly now: () => number,
    private readonly observer: EngineObserver | undefined,
  ) {}

  /** Generated tokens per second over the last few seconds. */
  tokPerSec(): number {
    return this.meter.rate(this.now())
  }

  /**
   * The rate a queued request's wait is estimated by: the lower of the last 5 s and the last 1 s.
   * A node's rate drops within a second when the machine's other work grows (measured in the
   * local stack, where three nodes share two cores: at 3× overload 27 % of the requests admitted
   * by the 5 s rate then queued past the bound), and the wait it admits by should not lag that.
   */
  waitTokPerSec(): number {
    const t = this.now()
    return Math.min(this.meter.rate(t), this.meter.rate(t, 1000))
  }

  /** abort(id) was called; the first call counts. */
  abortRequested(id: string): void {
    if (!this.abortedAt.has(id)) this.abortedAt.set(id, this.started)
  }

  /**
   * The abort of `id` is being applied to `seq` (undefined: it finished first). If the sequence
   * holds KV, its release is reported when a step carries it.
   */
  abortApplied(id: string, seq: Sequence | undefined): void {
    const abortedAt = this.abortedAt.get(id)
    this.abortedAt.delete(id)
    if (seq && abortedAt !== undefined && seq.state !== 'waiting') this.freeing.set(seq.seqId, { id, abortedAt })
  }

  /** A step is about to run; returns its start time for stepDone. */
  stepStarted(): number {
    this.started++
    return performance.now()
  }

  stepDone(plan: StepPlan, result: StepResult, startedAt: number): void {
    const durationMs = performance.now() - startedAt
    this.kvRows = result.kvRows
    this.kvTokens = result.kvTokens
    this.steps++
    // A row taken over stops working for its aborted request in the step that would release it.
    for (const seqId of [...plan.release, ...(plan.takeover ?? []).map((t) => t.from)]) this.reportFreed(seqId)
    const verified = result.decoded.more?.reduce((n, m) => n + m.length, 0) ?? 0
    this.meter.add(this.now(), result.decoded.tokens.length + verified + result.joined.tokens.length)
    if (plan.decode || plan.prefill.length > 0) {
      const prefillTokens = plan.prefill.reduce((n, p) => n + p.tokens.length, 0)
      // The edge weighs a cached prefix's worth in time by this (its cross-region rule).
      // Chunks of a few tokens say more about overhead than speed: only chunks of 16 or more count.
      if (prefillTokens >= 16 && result.prefillMs > 0) {
        const rate = (prefillTokens * 1000) / result.prefillMs
        this.prefillTokPerSec = this.prefillTokPerSec === 0 ? rate : 0.8 * this.prefillTokPerSec + 0.2 * rate
      }
      this.observer?.onStep?.({ durationMs, decodeRows: result.decoded.seqIds.length, prefillRows: plan.prefill.length, prefillTokens })
    }
  }

  private reportFreed(seqId: number): void {
    const f = this.freeing.get(seqId)
    if (!f) return
    this.freeing.delete(seqId)
    this.observer?.onAbortFreed?.(f.id, this.started - f.abortedAt)
  }
}
