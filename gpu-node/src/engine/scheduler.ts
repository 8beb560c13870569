import { AdmissionQueue } from './admission-queue.ts'
import type { Sequence } from './sequence.ts'
import type { StepPlan, StepResult } from '../model/runner.ts'

export interface SchedulerLimits {
  /** Max sequences resident in the batch (running + the one prefilling). */
  maxBatch: number
  /** Max sequences waiting for admission; new requests beyond it are refused. */
  maxQueue: number
  /** Max KV bytes one decode step may touch: rows × padded length × bytes per token. */
  kvBudgetBytes: number
  /** KV bytes per token per sequence, from the model. */
  kvBytesPerToken: number
  /** Tokens per prefill chunk. */
  prefillChunkTokens: number
}

/**
 * Decides each tick who runs. Contract:
 * - a tick is one decode step over every running sequence plus at most one prefill chunk;
 * - the batch cache is left-padded, so a decode step touches rows × (longest row + 1) tokens of
 *   KV; that product, in bytes, never exceeds `kvBudgetBytes` unless a single sequence alone
 *   does (one sequence always runs, or nothing could finish);
 * - when growth would break the budget, the lowest-priority, latest-arrived running sequence is
 *   preempted: its KV is released and it goes back to the queue to be recomputed later
 *   (vLLM's recompute preemption), keeping the tokens it already produced;
 * - a sequence is admitted to prefill only if the batch, with it, still fits the budget.
 * The scheduler holds no model: it returns a StepPlan and applies a StepResult.
 */
export class Scheduler {
  readonly queue: AdmissionQueue<Sequence>
  /** In batch-row order, as the runner holds them. */
  readonly running: Sequence[] = []
  prefilling: Sequence | null = null
  private releases: number[] = []
  private readonly bySeqId = new Map<number, Sequence>()

  constructor(
    readonly limits: SchedulerLimits,
    private readonly hooks: { onScheduled?(seq: Sequence): void; onPreempted?(seq: Sequence): void } = {},
  ) {
    this.queue = new AdmissionQueue(limits.maxQueue)
  }

  /** Queues a new request; false when the queue is full. */
  add(seq: Sequence): boolean {
    if (!this.queue.offer(seq)) return false
    this.bySeqId.set(seq.seqId, seq)
    return true
  }

  get hasWork(): boolean {
    return this.running.length > 0 || this.prefilling !== null || this.queue.length > 0 || this.releases.length > 0
  }

  /** Requests admitted and not finished. */
  get inFlight(): number {
    return this.bySeqId.size
  }

  /** Bytes the next decode step will touch. */
  kvBytesNextStep(): number {
    return this.running.length * (this.longestRunning() + 1) * this.limits.kvBytesPerToken
  }

  /** Ends a request wherever it is (abort, deadline): emits its finish and frees its KV at the next step. */
  cancel(seq: Sequence, reason: 'abort' | 'error', errorCode?: string): void {
    if (seq.state === 'finished') return
    if (seq.state === 'waiting') this.queue.remove(seq)
    else this.evict(seq)
    seq.finish(reason, undefined, errorCode)
    this.bySeqId.delete(seq.seqId)
  }

  schedule(nowMs: number): StepPlan {
    this.preemptToFitBudget()
    this.admitPrefill(nowMs)
    const plan: StepPlan = { release: this.releases, decode: this.running.length > 0 }
    this.releases = []
    const seq = this.prefilling
    if (seq) {
      const tokens = seq.tokens.slice(seq.prefilled, seq.prefilled + this.limits.prefillChunkTokens)
      const last = seq.prefilled + tokens.length === seq.tokens.length
      plan.prefill = { seqId: seq.seqId, tokens, last }
      if (seq.prefilled === 0) {
        const banEos = seq.req.ignoreEos === true
        plan.prefill.start = { sampling: seq.req.sampling, promptLen: seq.promptLen, banEos, tokens: seq.tokens.slice() }
      }
    }
    return plan
  }

  /** Applies the runner's sampled tokens: emits text, finishes sequences, moves the prefilled one into the batch. */
  update(plan: StepPlan, result: StepResult): void {
    const { seqIds, tokens } = result.decoded
    for (let i = 0; i < seqIds.length; i++) {
      const seq = this.bySeqId.get(seqIds[i])
      // A sequence cancelled while this step ran is already released; its token is dropped.
      if (seq && seq.state === 'running' && seq.append(tokens[i])) this.retire(seq)
    }
    const seq = plan.prefill ? this.bySeqId.get(plan.prefill.seqId) : undefined
    if (!seq || seq.state !== 'prefilling' || !plan.prefill) return
    seq.prefilled += plan.prefill.tokens.length
    if (!plan.prefill.last || result.firstToken === undefined) return
    this.prefilling = null
    seq.state = 'running'
    this.running.push(seq)
    if (seq.append(result.firstToken)) this.retire(seq)
  }

  private admitPrefill(nowMs: number): void {
    while (!this.prefilling) {
      const next = this.queue.peek()
      if (!next) return
      if (next.req.deadlineMs !== undefined && nowMs > next.req.deadlineMs) {
        this.cancel(next, 'error', 'deadline_exceeded')
        continue
      }
      if (!this.fits(next)) return
      this.queue.shift()
      next.state = 'prefilling'
      next.prefilled = 0
      this.prefilling = next
      this.hooks.onScheduled?.(next)
    }
  }

  /** Would the batch, with `seq` joined, stay within the batch cap and the KV budget? */
  private fits(seq: Sequence): boolean {
    const rows = this.running.length + 1
    if (rows === 1) return true
    if (rows > this.limits.maxBatch) return false
    const longest = Math.max(this.longestRunning(), seq.tokens.length) + 1
    return rows * longest * this.limits.kvBytesPerToken <= this.limits.kvBudgetBytes
  }

  private preemptToFitBudget(): void {
    while (this.running.length > 1 && this.kvBytesNextStep() > this.limits.kvBudgetBytes) {
      const victim = this.running.reduce((worst, s) =>
        s.priority > worst.priority || (s.priority === worst.priority && s.arrivalSeq > worst.arrivalSeq) ? s : worst,
      )
      this.evict(victim)
      victim.state = 'waiting'
      victim.prefilled = 0
      this.queue.requeue(victim)
      this.hooks.onPreempted?.(victim)
    }
  }

  private retire(seq: Sequence): void {
    this.evict(seq)
    this.bySeqId.delete(seq.seqId)
  }

  /** Takes a sequence out of the batch (or prefill) and schedules its KV release. */
  private evict(seq: Sequence): void {
    const i = this.running.indexOf(seq)
    if (i !== -1) this.running.splice(i, 1)
    if (this.prefilling === seq) this.prefilling = null
    this.releases.push(seq.seqId)
  }

  private longestRunning(): number {
    let longest = 0
    for (const s of this.running) longest = Math.max(longest, s.tokens.length)
    return longest
  }
}
