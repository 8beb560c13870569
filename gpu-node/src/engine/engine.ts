import type { OutputConstraint } from '../../../shared/src/generation.ts'
import type { ModelRunner, StepPlan, StepResult } from '../model/runner.ts'
import type { TokenDecoder } from './detokenizer.ts'
import type { BatchingPolicy } from './batching-policy.ts'
import { Scheduler } from './scheduler.ts'
import type { PrefixCache } from './prefix-cache.ts'
import { Sequence } from './sequence.ts'
import { StepMetrics } from './step-metrics.ts'
import type { EngineEvent, EngineHandle, EngineLimits, EngineObserver, EngineRequest, EngineStats, RequestEvent, SubmitResult } from './types.ts'

/** The shortest wait estimate and retry hint, ms: the estimate is no finer than this. */
const MIN_RETRY_HINT_MS = 100

export interface EngineOptions {
  runner: ModelRunner
  decoder: TokenDecoder
  limits: EngineLimits
  observer?: EngineObserver
  /** Continuous unless a benchmark asks for its static baseline. */
  policy?: BatchingPolicy
  now?: () => number
  /** The model served: seeds the prefix cache's keys. */
  modelKey?: string
}

/** What the engine keeps per admitted request: its sequence and where its events go. */
interface Admitted {
  seq: Sequence
  onEvent: (event: EngineEvent) => void
}

/**
 * The one owner of engine state. HTTP code calls submit() and abort(); both are applied
 * between steps by the step loop, which reads top to bottom:
 * apply aborts → schedule → run the model (worker thread) → update (returns events) → emit.
 */
export class Engine implements EngineHandle {
  private readonly scheduler: Scheduler
  private readonly metrics: StepMetrics
  private readonly admitted = new Map<string, Admitted>()
  /** Request ids whose abort() is applied before the next step. */
  private readonly pendingAborts = new Set<string>()
  private readonly now: () => number
  private nextSeqId = 1
  private draining = false
  private closed = false
  private wakeUp: (() => void) | null = null
  private drained: Array<() => void> = []
  private readonly loopDone: Promise<void>

  constructor(private readonly opts: EngineOptions) {
    this.now = opts.now ?? Date.now
    this.metrics = new StepMetrics(this.now, opts.observer)
    const { kvBytesPerToken, batching, speculation } = opts.runner.info
    this.scheduler = new Scheduler(
      { ...opts.limits, kvBytesPerToken, batching, raggedDecode: speculation === true },
      {
        onScheduled: (seq) => opts.observer?.onScheduled?.(seq.req.id, this.now() - seq.arrivalMs),
        onPreempted: (seq) => opts.observer?.onPreempted?.(seq.req.id),
      },
      opts.policy,
      opts.modelKey,
    )
    this.loopDone = this.loop()
  }

  /** Rows and tokens resident in the runner's batch KV after the last step. */
  get kvRows(): number {
    return this.metrics.kvRows
  }

  get kvTokens(): number {
    return this.metrics.kvTokens
  }

  /** Completed scheduler ticks (tests count steps with it). */
  get steps(): number {
    return this.metrics.steps
  }

  prepare(constraint: OutputConstraint): Promise<void> {
    const { runner } = this.opts
    if (!runner.prepare) return Promise.reject(new Error('structured output is not available on this model runner'))
    return runner.prepare(constraint)
  }

  submit(req: EngineRequest, onEvent: (event: EngineEvent) => void): SubmitResult {
    if (this.draining || this.closed) return { ok: false, code: 'draining', retryAfterMs: 1000 }
    const eos = this.opts.runner.info.eosTokenIds
    const seqId = this.nextSeqId++
    const seq = new Sequence(seqId, seqId, req, this.opts.decoder, eos, this.now())
    if (req.after !== undefined) seq.leader = this.admitted.get(req.after)?.seq
    // Only the queued work that runs before it counts: batch requests queue behind interactive ones.
    const waitMs = this.estimateWaitMs(req.priority)
    if (req.deadlineMs !== undefined && this.now() + waitMs > req.deadlineMs) {
      return { ok: false, code: 'overloaded', retryAfterMs: waitMs }
    }
    // Under sustained overload a queue bounded only by its length grows a wait no client keeps
    // waiting for (measured: 3× overload through the edge, queued requests' clients timed out at
    // 30 s). Refusing at once with the wait as retry-after-ms lets the edge try another node and
    // the client back off, as an honest 503 should. The hint is when the queue will be back under
    // the bound (the wait less the bound), not the whole wait: the edge skips a refusing node for
    // as long as it says, and told the whole wait it skipped every node until its queue had run
    // dry (measured, 3× overload through the Miniflare edge: two of three nodes idle at 0.13–0.16
    // cores while their queues had room).
    const maxWait = this.scheduler.limits.maxQueueWaitMs
    if (maxWait && this.scheduler.queue.length > 0 && waitMs > maxWait) {
      return { ok: false, code: 'overloaded', retryAfterMs: Math.max(MIN_RETRY_HINT_MS, waitMs - maxWait) }
    }
    // A full queue makes room for a request of better priority: its worst queued request (the
    // latest of the worst) is refused now, as it would have been had it come last.
    if (!this.scheduler.add(seq) && !this.scheduler.addInPlaceOfWorse(seq, 'overloaded')) return { ok: false, code: 'overloaded', retryAfterMs: waitMs }
    this.admitted.set(req.id, { seq, onEvent })
    this.wake()
    return { ok: true }
  }

  abort(id: string): void {
    if (!this.admitted.has(id) || this.pendingAborts.has(id)) return
    this.pendingAborts.add(id)
    this.metrics.abortRequested(id)
    this.wake()
  }

  stats(): EngineStats {
    const s = this.scheduler
    return {
      running: s.running.length + s.prefilling.length,
      waiting: s.queue.length,
      maxBatch: s.limits.maxBatch,
      kvUsedFrac: Math.min(1, s.kvBytesNextStep() / s.limits.kvBudgetBytes),
      tokPerSec: this.metrics.tokPerSec(),
      prefillTokPerSec: this.metrics.prefillTokPerSec,
      draining: this.draining,
      ...(s.prefix ? { prefixCache: this.prefixStats(s.prefix) } : {}),
      ...(s.speculation ? { speculation: { ...s.speculation.stats } } : {}),
    }
  }

  private prefixStats(cache: PrefixCache): NonNullable<EngineStats['prefixCache']> {
    const blockBytes = cache.blockTokens * this.scheduler.limits.kvBytesPerToken
    return { ...cache.stats, bytes: cache.blocks * blockBytes, capacityBytes: cache.capacityBlocks * blockBytes }
  }

  /**
   * How long a new request would wait before its first token, from the queued work and the
   * recent token rate. Used for `retry-after-ms` and deadline admission: an estimate, stated
   * honestly rather than a fixed number.
   */
  estimateWaitMs(priority = Infinity): number {
    let ahead = 0
    let backlogTokens = 0
    for (const seq of this.scheduler.queue) {
      if (seq.priority > priority) continue
      ahead++
      backlogTokens += Math.min(seq.req.maxTokens, 512)
    }
    const rate = this.metrics.waitTokPerSec()
    // No recent tokens means no measured rate: guess from the queue position alone.
    if (rate === 0) return MIN_RETRY_HINT_MS * (ahead + 1)
    // Capped at 30 s: both SDKs ignore a retry-after-ms of 60 s or more and fall back to their own backoff.
    return Math.round(Math.min(30_000, Math.max(MIN_RETRY_HINT_MS, (backlogTokens / rate) * 1000)))
  }

  drain(): Promise<void> {
    this.draining = true
    if (this.admitted.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.drained.push(resolve))
  }

  async close(): Promise<void> {
    this.closed = true
    for (const id of this.admitted.keys()) this.abort(id)
    this.wake()
    await this.loopDone
    await this.opts.runner.close()
  }

  private async loop(): Promise<void> {
    for (;;) {
      this.emit(this.applyAborts())
      if (!this.scheduler.hasWork) {
        if (this.closed) return
        await this.sleep()
        continue
      }
      const plan = this.scheduler.schedule(this.now())
      this.emit(this.scheduler.takeEvents()) // requests dropped past their deadline
      if (!plan.decode && plan.prefill.length === 0 && plan.release.length === 0) {
        await this.sleep(5) // work is queued but the policy holds it (a static batch filling up)
        continue
      }
      const startedAt = this.metrics.stepStarted()
      const { result, events } = await this.step(plan)
      this.emit(events)
      // A step's time runs to the delivery of its events, as zl_step_duration_seconds always has.
      if (result) this.metrics.stepDone(plan, result, startedAt)
    }
  }

  /** Runs one plan and applies its result; returns the events of both (no result: the step failed). */
  private async step(plan: StepPlan): Promise<{ result?: StepResult; events: readonly RequestEvent[] }> {
    try {
      const result = await this.opts.runner.step(plan)
      return { result, events: this.scheduler.update(plan, result) }
    } catch {
      // A failed step leaves the batch cache unknown: end every admitted sequence with a
      // shaped error (their KV is released with them) rather than stream garbage or hang.
      for (const { seq } of this.admitted.values()) this.scheduler.cancel(seq, 'error', 'internal')
      return { events: this.scheduler.takeEvents() }
    }
  }

  private applyAborts(): readonly RequestEvent[] {
    for (const id of this.pendingAborts) {
      const seq = this.admitted.get(id)?.seq
      this.metrics.abortApplied(id, seq)
      if (seq) this.scheduler.cancel(seq, 'abort')
    }
    this.pendingAborts.clear()
    return this.scheduler.takeEvents()
  }

  /** Hands each event to its request's consumer; a finish forgets the request. */
  private emit(events: readonly RequestEvent[]): void {
    for (const { id, event } of events) {
      const admitted = this.admitted.get(id)
      if (!admitted) continue
      if (event.type === 'finish') {
        this.admitted.delete(id)
        if (this.admitted.size === 0) for (const resolve of this.drained.splice(0)) resolve()
      }
      try {
        admitted.onEvent(event)
      } catch {
        // A consumer's failure (e.g. a socket that broke while writing) must not stop the engine.
        this.abort(id)
      }
    }
  }

  /** Waits for submit()/abort()/close(), or at most `ms`. */
  private sleep(ms?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.wakeUp = resolve
      if (ms !== undefined) setTimeout(resolve, ms)
    })
  }

  private wake(): void {
    const w = this.wakeUp
    this.wakeUp = null
    w?.()
  }
}
