import { performance } from 'node:perf_hooks'
import type { ModelRunner, StepResult } from '../model/runner.ts'
import type { TokenDecoder } from './detokenizer.ts'
import type { BatchingPolicy } from './batching-policy.ts'
import { Scheduler } from './scheduler.ts'
import { Sequence } from './sequence.ts'
import { ThroughputMeter } from './throughput-meter.ts'
import type { EngineEvent, EngineHandle, EngineLimits, EngineObserver, EngineRequest, EngineStats, SubmitResult } from './types.ts'

export interface EngineOptions {
  runner: ModelRunner
  decoder: TokenDecoder
  limits: EngineLimits
  observer?: EngineObserver
  /** Continuous unless a benchmark asks for its static baseline. */
  policy?: BatchingPolicy
  now?: () => number
}

/**
 * The one owner of engine state. HTTP code calls submit() and abort(); both are applied
 * between steps by the step loop, which reads top to bottom:
 * apply aborts → schedule → run the model (worker thread) → update sequences → emit events.
 */
export class Engine implements EngineHandle {
  private readonly scheduler: Scheduler
  private readonly byId = new Map<string, Sequence>()
  /** Request id → stepsStarted when abort() was called. */
  private readonly pendingAborts = new Map<string, number>()
  /** Aborted sequences whose KV release is in the next plan: seqId → (id, stepsStarted at abort). */
  private readonly freeing = new Map<number, { id: string; abortedAt: number }>()
  private stepsStarted = 0
  private readonly meter = new ThroughputMeter(5000)
  private readonly now: () => number
  private nextSeqId = 1
  private draining = false
  private closed = false
  private wakeUp: (() => void) | null = null
  private drained: Array<() => void> = []
  private readonly loopDone: Promise<void>
  /** Rows and tokens resident in the runner's batch KV after the last step. */
  kvRows = 0
  kvTokens = 0
  /** Completed scheduler ticks (tests count steps with it). */
  steps = 0

  constructor(private readonly opts: EngineOptions) {
    this.now = opts.now ?? Date.now
    const kvBytesPerToken = opts.runner.info.kvBytesPerToken
    this.scheduler = new Scheduler(
      { ...opts.limits, kvBytesPerToken },
      {
        onScheduled: (seq) => opts.observer?.onScheduled?.(seq.req.id, this.now() - seq.arrivalMs),
        onPreempted: (seq) => opts.observer?.onPreempted?.(seq.req.id),
      },
      opts.policy,
    )
    this.loopDone = this.loop()
  }

  submit(req: EngineRequest, onEvent: (event: EngineEvent) => void): SubmitResult {
    if (this.draining || this.closed) return { ok: false, code: 'draining', retryAfterMs: 1000 }
    const eos = this.opts.runner.info.eosTokenIds
    const seqId = this.nextSeqId++
    const seq = new Sequence(seqId, seqId, req, (e) => this.deliver(req.id, onEvent, e), this.opts.decoder, eos, this.now())
    if (req.deadlineMs !== undefined && this.now() + this.estimateWaitMs() > req.deadlineMs) {
      return { ok: false, code: 'overloaded', retryAfterMs: this.estimateWaitMs() }
    }
    if (!this.scheduler.add(seq)) return { ok: false, code: 'overloaded', retryAfterMs: this.estimateWaitMs() }
    this.byId.set(req.id, seq)
    this.wake()
    return { ok: true }
  }

  abort(id: string): void {
    if (!this.byId.has(id) || this.pendingAborts.has(id)) return
    this.pendingAborts.set(id, this.stepsStarted)
    this.wake()
  }

  stats(): EngineStats {
    const s = this.scheduler
    return {
      running: s.running.length + s.prefilling.length,
      waiting: s.queue.length,
      maxBatch: s.limits.maxBatch,
      kvUsedFrac: Math.min(1, s.kvBytesNextStep() / s.limits.kvBudgetBytes),
      tokPerSec: this.meter.rate(this.now()),
      draining: this.draining,
    }
  }

  /**
   * How long a new request would wait before its first token, from the queued work and the
   * recent token rate. Used for `retry-after-ms` and deadline admission: an estimate, stated
   * honestly rather than a fixed number.
   */
  estimateWaitMs(): number {
    const queue = this.scheduler.queue
    const rate = this.meter.rate(this.now())
    // No recent tokens means no measured rate: guess from the queue position alone.
    if (rate === 0) return 100 * (queue.length + 1)
    let backlogTokens = 0
    for (const seq of queue) backlogTokens += Math.min(seq.req.maxTokens, 512)
    // Capped at 30 s: both SDKs ignore a retry-after-ms of 60 s or more and fall back to their own backoff.
    return Math.round(Math.min(30_000, Math.max(100, (backlogTokens / rate) * 1000)))
  }

  drain(): Promise<void> {
    this.draining = true
    if (this.byId.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.drained.push(resolve))
  }

  async close(): Promise<void> {
    this.closed = true
    for (const id of this.byId.keys()) this.pendingAborts.set(id, this.stepsStarted)
    this.wake()
    await this.loopDone
    await this.opts.runner.close()
  }

  private async loop(): Promise<void> {
    while (!this.closed || this.scheduler.hasWork) {
      this.applyAborts()
      if (!this.scheduler.hasWork) {
        if (this.closed) break
        await new Promise<void>((resolve) => (this.wakeUp = resolve))
        continue
      }
      const plan = this.scheduler.schedule(this.now())
      if (!plan.decode && plan.prefill.length === 0 && plan.release.length === 0) {
        // Work is queued but the policy holds it (a static batch filling up): look again soon.
        await new Promise<void>((resolve) => {
          this.wakeUp = resolve
          setTimeout(resolve, 5)
        })
        continue
      }
      const t0 = performance.now()
      let result: StepResult
      this.stepsStarted++
      try {
        result = await this.opts.runner.step(plan)
        this.scheduler.update(plan, result)
      } catch {
        // A failed step leaves the batch cache unknown: end every admitted sequence with a
        // shaped error (their KV is released with them) rather than stream garbage or hang.
        for (const seq of [...this.byId.values()]) this.scheduler.cancel(seq, 'error', 'internal')
        continue
      }
      const durationMs = performance.now() - t0
      this.kvRows = result.kvRows
      this.kvTokens = result.kvTokens
      this.steps++
      this.reportFreed(plan.release)
      this.meter.add(this.now(), result.decoded.tokens.length + result.joined.tokens.length)
      if (plan.decode || plan.prefill.length > 0) {
        const prefillTokens = plan.prefill.reduce((n, p) => n + p.tokens.length, 0)
        this.opts.observer?.onStep?.({ durationMs, decodeRows: result.decoded.seqIds.length, prefillRows: plan.prefill.length, prefillTokens })
      }
    }
  }

  private applyAborts(): void {
    for (const [id, abortedAt] of this.pendingAborts) {
      const seq = this.byId.get(id)
      if (!seq) continue
      if (seq.state !== 'waiting') this.freeing.set(seq.seqId, { id, abortedAt })
      this.scheduler.cancel(seq, 'abort')
    }
    this.pendingAborts.clear()
  }

  private reportFreed(released: number[]): void {
    for (const seqId of released) {
      const f = this.freeing.get(seqId)
      if (!f) continue
      this.freeing.delete(seqId)
      this.opts.observer?.onAbortFreed?.(f.id, this.stepsStarted - f.abortedAt)
    }
  }

  private deliver(id: string, onEvent: (e: EngineEvent) => void, event: EngineEvent): void {
    if (event.type === 'finish') {
      this.byId.delete(id)
      if (this.byId.size === 0) for (const resolve of this.drained.splice(0)) resolve()
    }
    try {
      onEvent(event)
    } catch {
      // A consumer's failure (e.g. a socket that broke while writing) must not stop the engine.
      this.abort(id)
    }
  }

  private wake(): void {
    const w = this.wakeUp
    this.wakeUp = null
    w?.()
  }
}
