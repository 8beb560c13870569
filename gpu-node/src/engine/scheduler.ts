import { continuousBatching, type BatchingPolicy } from './batching-policy.ts'
import { AdmissionQueue } from './admission-queue.ts'
import type { Sequence } from './sequence.ts'
import type { EngineLimits, RequestEvent } from './types.ts'
import { DEFAULT_PREFIX_BLOCK_TOKENS, type Batching, type BlockSave, type DonorRow as Donor, type PrefillPart, type Restore, type StepPlan, type StepResult, type Takeover } from '../model/runner.ts'
import { PrefixCache } from './prefix-cache.ts'
import { longestSharedRow, mayFeed } from './shared-row.ts'
import { Speculation } from './speculation.ts'
import { CLASS_PRIORITY } from '../../../shared/src/priority.ts'

export interface SchedulerLimits extends EngineLimits {
  /** KV bytes per token per sequence, from the model. */
  kvBytesPerToken: number
  /** Which rows may share a batch, from the model (default 'continuous'). */
  batching?: Batching
  /**
   * The runner's decode step takes rows of several tokens (ModelInfo `speculation`: slot KV path,
   * continuous batching): drafts to verify, a takeover's prompt. Without it SPEC_DECODING has no
   * effect and no request takes over a row.
   */
  raggedDecode?: boolean
}

const NO_EVENTS: readonly RequestEvent[] = Object.freeze([])

/** The most `prefillChunkTokens` one tick's chunk may span: a burst's step stays bounded in time and memory. */
export const BURST_CHUNKS = 8

/**
 * A tick's prefill chunk, in tokens. Its length is what every decoding row waits for its next
 * token, and what a request arriving meanwhile waits before it can be scheduled; what it buys is
 * first tokens for the prompts it admits. So it is `chunk` while the rows decoding are as many as
 * the interactive prompts waiting, and grows with the interactive prompts waiting per decoding
 * row, up to BURST_CHUNKS chunks: a burst that arrives together is prefilled together, as a
 * batched generate() does, while a trickle beside a full batch still comes in slices of `chunk`.
 * Batch-class prompts never widen it: their first tokens are not waited on, and the step an
 * interactive arrival meets in flight stays short.
 */
export function chunkFor(chunk: number, waiting: number, decoding: number): number {
  return chunk * Math.min(BURST_CHUNKS, Math.max(1, Math.floor(waiting / Math.max(1, decoding))))
}

/**
 * How long after the last interactive request leaves batch rows stay limited
 * (`batchRowsBesideInteractive`): the limit helps an interactive request only if the batch is
 * already small when it arrives, and a user's next request (a keystroke, a chat turn) is seconds
 * away, not milliseconds.
 */
export const INTERACTIVE_LINGER_MS = 5000

const isInteractive = (s: Sequence) => s.priority < CLASS_PRIORITY.batch

/**
 * Decides each tick who runs. Contract:
 * - a tick is one decode step over every running sequence plus at most one prefill chunk: a
 *   slice of one long prompt, or several whole short prompts whose left-padded batch
 *   (count × longest) fits the chunk. The chunk is `prefillChunkTokens` times the interactive
 *   prompts waiting per running row, from 1 to BURST_CHUNKS (see chunkFor);
 * - the batch cache is left-padded, so a decode step touches rows × (longest row + 1) tokens of
 *   KV; that product, in bytes, never exceeds `kvBudgetBytes` unless a single sequence alone
 *   does (one sequence always runs, or nothing could finish);
 * - when growth would break the budget, the lowest-priority, latest-arrived running sequence is
 *   preempted: its KV is released and it goes back to the queue to be recomputed later
 *   (vLLM's recompute preemption), keeping the tokens it already produced;
 * - a sequence is admitted to prefill only if the batch, with it, still fits the budget;
 * - with 'equal-lengths' batching (a graph that derives positions from the past length), a
 *   sequence starts only into an empty batch or beside rows it will equal in length when it
 *   joins, so no row is ever left-padded: exact, at the cost of concurrency; with 'alone' (a
 *   graph whose rows depend on each other), only into an empty batch.
 * - with the prefix cache on, a sequence's longest cached block-aligned prefix is reused and
 *   only the rest is prefilled; such prompts share a tick only with each other (they continue
 *   a past, which the left-padded multi-prompt chunk cannot hold), each run on its own. The KV of every complete
 *   block (prompt, then generated) is saved as it lands in the batch (StepPlan `save`).
 * The scheduler holds no model and calls no consumer: it returns a StepPlan, applies a
 * StepResult, and returns the events both produced (text, finish) as plain data.
 */
export class Scheduler {
  readonly queue: AdmissionQueue<Sequence>
  /** In batch-row order, as the runner holds them. */
  readonly running: Sequence[] = []
  /** Sequences whose prompt is being prefilled: one long prompt across ticks, or a group within one tick. */
  prefilling: Sequence[] = []
  private releases: number[] = []
  /** Batch rows the next plan releases: their KV is still there when it starts, so they may give it (donorFor). */
  private releasing: Sequence[] = []
  /** Rows the next plan hands to new sequences (their KV is complete only after its decode step). */
  private takeovers: Takeover[] = []
  /** New rows the next plan restores from cached prefixes (complete, as takeovers, only after its decode step). */
  private restores: Restore[] = []
  /** Events produced since the engine last took them (cancels, deadline drops, step updates). */
  private outbox: RequestEvent[] = []
  private readonly bySeqId = new Map<number, Sequence>()
  /** The automatic prefix cache's index; undefined when off. */
  readonly prefix?: PrefixCache
  private saves: BlockSave[] = []
  /** Speculative decoding by prompt lookup, when on and the runner verifies drafts (speculation.ts). */
  readonly speculation?: Speculation
  /** When interactive work was last seen (running, prefilling or queued). */
  private interactiveSeenMs = -Infinity
  /** Batch-class rows this tick may hold in all: limited while interactive work is live. */
  private batchRowLimit = Infinity

  constructor(
    readonly limits: SchedulerLimits,
    private readonly hooks: { onScheduled?(seq: Sequence): void; onPreempted?(seq: Sequence): void } = {},
    private readonly policy: BatchingPolicy = continuousBatching(),
    /** Seeds the prefix cache's keys: the model served. */
    prefixRoot = '',
  ) {
    this.queue = new AdmissionQueue(limits.maxQueue)
    const blockTokens = limits.prefixBlockTokens ?? DEFAULT_PREFIX_BLOCK_TOKENS
    const capacity = Math.floor((limits.prefixCacheBytes ?? 0) / (blockTokens * limits.kvBytesPerToken))
    if (capacity > 0) this.prefix = new PrefixCache(blockTokens, capacity, prefixRoot)
    const spec = limits.speculation
    if (spec && spec.mode !== 'off' && limits.raggedDecode) this.speculation = new Speculation(spec)
  }

  /** Queues a new request; false when the queue is full. */
  add(seq: Sequence): boolean {
    if (!this.queue.offer(seq)) return false
    this.bySeqId.set(seq.seqId, seq)
    return true
  }

  /**
   * Into a full queue in place of its worst request when that one's priority is worse: the
   * displaced request ends with `errorCode` (its finish comes with the next events). False, and
   * nothing changes, when no queued request is worse.
   */
  addInPlaceOfWorse(seq: Sequence, errorCode: string): boolean {
    const queued = [...this.queue]
    const worst = queued.length > 0 ? latestOfWorst(queued) : undefined
    if (!worst || worst.priority <= seq.priority) return false
    this.cancel(worst, 'error', errorCode)
    this.queue.requeue(seq)
    this.bySeqId.set(seq.seqId, seq)
    return true
  }

  get hasWork(): boolean {
    return this.running.length > 0 || this.prefilling.length > 0 || this.queue.length > 0 || this.releases.length > 0 || this.saves.length > 0
  }

  /** Requests admitted and not finished. */
  get inFlight(): number {
    return this.bySeqId.size
  }

  /** Bytes the next decode step will touch. */
  kvBytesNextStep(): number {
    return this.running.length * (this.longestRunning() + 1) * this.limits.kvBytesPerToken
  }

  /** Ends a request wherever it is (abort, deadline): queues its finish and frees its KV at the next step. */
  cancel(seq: Sequence, reason: 'abort' | 'error', errorCode?: string): void {
    if (seq.state === 'finished') return
    this.unfork(seq)
    if (seq.state === 'waiting') this.queue.remove(seq)
    else this.evict(seq)
    seq.finish(this.outbox, reason, undefined, errorCode)
    this.bySeqId.delete(seq.seqId)
    this.speculation?.forget(seq.seqId)
  }

  /** A leader leaving before its prompt joined: the choices waiting on it go back to the queue, to run on their own. */
  private unfork(leader: Sequence): void {
    for (const fork of leader.forks) {
      if (fork.state !== 'prefilling') continue
      this.prefilling.splice(this.prefilling.indexOf(fork), 1)
      fork.state = 'waiting'
      fork.forked = false
      this.queue.requeue(fork)
    }
    leader.forks = []
  }

  /** The events produced since the last call, in order. */
  takeEvents(): readonly RequestEvent[] {
    // Most calls find nothing (aborts and deadline drops are rare): no array per call then.
    if (this.outbox.length === 0) return NO_EVENTS
    const events = this.outbox
    this.outbox = []
    return events
  }

  schedule(nowMs: number): StepPlan {
    this.preemptToFitBudget()
    this.batchRowLimit = this.batchRowsAllowed(nowMs)
    const chunk = chunkFor(this.limits.prefillChunkTokens, this.queue.before(CLASS_PRIORITY.batch), this.running.length)
    this.admitPrefill(nowMs, chunk)
    // A takeover's or a restore's prompt rides on the decode step: it runs even ahead of a better prefill.
    const decode = this.running.length > 0 && (this.takeovers.length + this.restores.length > 0 || !this.prefillsAhead())
    const plan: StepPlan = { release: this.releases, decode, prefill: this.prefilling.filter((seq) => !seq.forked).map((seq) => this.prefillPart(seq, chunk)) }
    if (this.saves.length > 0) plan.save = this.saves
    if (this.takeovers.length > 0) plan.takeover = this.takeovers
    if (this.restores.length > 0) plan.restore = this.restores
    if (plan.decode && this.speculation) {
      // A verify step attends over each row's drafts too: they stay within the KV budget.
      const perRow = Math.floor(this.limits.kvBudgetBytes / this.limits.kvBytesPerToken / this.running.length)
      const fed = this.fedRows()
      const rows = fed.size > 0 ? this.running.filter((s) => !fed.has(s.seqId)) : this.running
      const drafts = this.speculation.plan(rows, perRow - this.longestRunning(), plan.prefill.length > 0 || this.queue.length > 0)
      if (drafts.length > 0) plan.drafts = drafts
    }
    this.releases = []
    this.releasing = []
    this.takeovers = []
    this.restores = []
    this.saves = []
    return plan
  }

  /**
   * Applies the runner's sampled tokens: finishes sequences, moves prefilled ones into the batch,
   * and returns the resulting events (with any queued since the last takeEvents()).
   */
  update(plan: StepPlan, result: StepResult): readonly RequestEvent[] {
    const { seqIds, tokens, more } = result.decoded
    this.observeSpeculation(plan, result)
    for (let i = 0; i < seqIds.length; i++) {
      const seq = this.bySeqId.get(seqIds[i])
      // A sequence cancelled while this step ran is already released; its tokens are dropped.
      if (!seq || seq.state !== 'running') continue
      // A verify step's accepted tokens follow the first, each as a decode step's would; the
      // ones after a finish (a stop string, EOS, max_tokens) are dropped with the row.
      const row = [tokens[i]!, ...(more?.[i] ?? [])]
      for (let j = 0; j < row.length; j++) {
        seq.kvLen++
        this.saveBlocks(seq)
        const logprob = j === 0 ? result.decoded.logprobs?.[i] : result.decoded.moreLogprobs?.[i]?.[j - 1]
        if (seq.append(row[j]!, this.outbox, logprob)) {
          this.retire(seq)
          break
        }
      }
    }
    const joined = new Set(result.joined.seqIds)
    for (const part of plan.prefill) {
      const seq = this.bySeqId.get(part.seqId)
      if (!seq || seq.state !== 'prefilling') continue
      seq.prefilled += part.tokens.length
      // A runner that completed a prompt without sampling its first token would leave the
      // sequence prefilling forever (empty chunks each tick): end it as an internal error.
      if (part.last && !joined.has(seq.seqId)) this.cancel(seq, 'error', 'internal')
      for (const fork of part.forks ?? []) {
        const f = this.bySeqId.get(fork.seqId)
        if (f && f.state === 'prefilling' && !joined.has(f.seqId)) this.cancel(f, 'error', 'internal')
      }
    }
    for (let i = 0; i < result.joined.seqIds.length; i++) {
      const seq = this.bySeqId.get(result.joined.seqIds[i])
      if (!seq || seq.state !== 'prefilling') continue
      this.prefilling.splice(this.prefilling.indexOf(seq), 1)
      seq.state = 'running'
      this.running.push(seq)
      seq.kvLen = seq.tokens.length
      seq.prefilled = seq.tokens.length
      seq.forked = false
      seq.forks = []
      this.saveBlocks(seq)
      if (seq.append(result.joined.tokens[i], this.outbox, result.joined.logprobs?.[i])) this.retire(seq)
    }
    return this.takeEvents()
  }

  /** A decode step's cost (by tokens fed) and each drafted row's acceptance, for the next steps' drafts. */
  private observeSpeculation(plan: StepPlan, result: StepResult): void {
    const spec = this.speculation
    if (!spec || !plan.decode || result.decoded.seqIds.length === 0) return
    const drafted = new Map((plan.drafts ?? []).map((d) => [d.seqId, d.tokens.length]))
    // A step that also fed prompts (takeovers, restores) costs what they did: it measures no step width.
    const fedPrompts = (plan.takeover?.length ?? 0) + (plan.restore?.length ?? 0) > 0
    spec.observeStep(result.decoded.seqIds.length, 1 + Math.max(0, ...drafted.values()), fedPrompts ? undefined : result.decodeMs)
    result.decoded.seqIds.forEach((id, i) => {
      const proposed = drafted.get(id)
      if (proposed !== undefined) spec.observeRow(id, proposed, result.decoded.more?.[i]?.length ?? 0)
    })
  }

  private prefillPart(seq: Sequence, chunk: number): PrefillPart {
    const tokens = seq.tokens.slice(seq.prefilled, seq.prefilled + chunk)
    const part: PrefillPart = { seqId: seq.seqId, tokens, last: seq.prefilled + tokens.length === seq.tokens.length }
    if (seq.prefilled === seq.reused) {
      part.start = startOf(seq)
      if (seq.donor) part.start.donor = seq.donor
      else if (seq.reused > 0) part.start.prefix = seq.blocks.map((b) => b.slot)
    }
    const forks = seq.forks.filter((f) => f.state === 'prefilling')
    if (part.last && forks.length > 0) part.forks = forks.map((f) => ({ seqId: f.seqId, start: startOf(f) }))
    return part
  }

  /**
   * The other choices of `leader`'s prompt queued right behind it (OpenAI `n`) join with it: their
   * first tokens are sampled from its prefill's last logits, each with its own sampler, and its
   * KV is copied to their rows, so the prompt is computed once and nobody waits a tick.
   */
  private admitForks(leader: Sequence): void {
    for (;;) {
      const f = this.queue.peek()
      // 'alone' batching (rows that depend on each other) takes one sequence at a time.
      if (!f || f.leader !== leader || f.generated > 0 || this.limits.batching === 'alone' || !this.fits(f)) return
      this.queue.shift()
      f.state = 'prefilling'
      f.prefilled = 0
      f.reused = 0
      f.forked = true
      leader.forks.push(f)
      this.prefilling.push(f)
      this.policy.admitted()
      this.hooks.onScheduled?.(f)
    }
  }

  /** Holds (and has the runner save, when new) each complete block of `seq`'s KV not yet held. */
  private saveBlocks(seq: Sequence): void {
    const cache = this.prefix
    if (!cache) return
    cache.extendChain(seq.chain, seq.tokens, seq.kvLen, seq.req.cacheSalt)
    const b = cache.blockTokens
    while (seq.blocks.length < seq.chain.length && (seq.blocks.length + 1) * b <= seq.kvLen) {
      const k = seq.blocks.length
      const held = cache.hold(seq.chain[k])
      // Every block is held by running sequences: this one's are cached when some are released.
      if (!held) return
      seq.blocks.push(held.block)
      if (!held.fresh) continue
      this.saves.push({ seqId: seq.seqId, from: k * b, slot: held.block.slot })
      if ((k + 1) * b <= seq.promptLen) seq.createdTokens += b
    }
  }

  /** Cached blocks `seq` would reuse now (computing its chain as needed). */
  private prefixHit(seq: Sequence): number {
    if (!this.prefix) return 0
    this.prefix.extendChain(seq.chain, seq.tokens, seq.tokens.length, seq.req.cacheSalt)
    return this.prefix.peek(seq.chain, seq.tokens.length)
  }

  /**
   * Takes `seq`'s cached prefix for its prefill (and counts the lookup): a donor row's tokens
   * when one was found, else its cached blocks. A sequence started from a donor holds no blocks
   * until it joins; its complete ones are then held or saved from its own row (saveBlocks).
   */
  private reusePrefix(seq: Sequence, donor?: Donor): void {
    if (!this.prefix) return
    seq.blocks = donor ? [] : this.prefix.acquire(seq.chain, seq.tokens.length)
    if (donor) this.prefix.countLookup(seq.tokens.length, donor.tokens)
    seq.reused = donor?.tokens ?? seq.blocks.length * this.prefix.blockTokens
    seq.donor = donor
    seq.prefilled = seq.reused
    seq.cachedTokens ??= Math.min(seq.reused, seq.promptLen)
  }

  /**
   * `seq` continues `from`'s row, which the next plan no longer releases: it joins the batch now,
   * its first `keep` tokens there already, the rest of its prompt fed by the next decode step
   * (Takeover). An editor's keystroke then costs its successor one decode step, not a prefill.
   */
  private takeOver(seq: Sequence, from: Sequence, keep: number): void {
    this.releasing.splice(this.releasing.indexOf(from), 1)
    this.releases.splice(this.releases.indexOf(from.seqId), 1)
    seq.blocks = []
    seq.reused = keep
    seq.cachedTokens ??= Math.min(keep, seq.promptLen)
    this.prefix?.countLookup(seq.tokens.length, keep)
    this.takeovers.push({ from: from.seqId, seqId: seq.seqId, keep, tokens: seq.tokens.slice(keep), start: startOf(seq) })
    this.joinFed(seq)
  }

  /**
   * `seq` joins the batch now as a new row restored from its cached prefix (its blocks, or a copy
   * of `donor`'s row), the rest of its prompt fed by the next decode step (Restore): no prefill
   * run of its own, and no copy of its KV into the batch after one. The plan adds its row after
   * its releases; nothing preempts it before then, as later admissions in the tick are of its
   * priority or worse (the queue's order) and preemptFor takes only worse rows.
   */
  private restore(seq: Sequence, donor?: Donor): void {
    this.reusePrefix(seq, donor)
    const from = donor ? { donor } : { prefix: seq.blocks.map((b) => b.slot) }
    this.restores.push({ seqId: seq.seqId, ...from, tokens: seq.tokens.slice(seq.reused), start: startOf(seq) })
    this.joinFed(seq)
  }

  /** `seq` runs from this tick, the rest of its prompt fed by the plan's decode step (a takeover, a restore). */
  private joinFed(seq: Sequence): void {
    seq.state = 'running'
    seq.donor = undefined
    seq.prefilled = seq.tokens.length
    // As every running row: its KV holds all its tokens but the one the next step feeds.
    seq.kvLen = seq.tokens.length - 1
    this.running.push(seq)
    this.policy.admitted()
    this.hooks.onScheduled?.(seq)
  }

  /** A batch row (running, or released by the next plan) to continue (shared-row.ts); off with the prefix cache. */
  private donorFor(seq: Sequence, cached: number): Donor | undefined {
    if (!this.prefix) return undefined
    // A row fed its prompt this tick holds only its cached tokens until the plan's decode step.
    const fed = this.fedRows()
    const rows = [...this.running, ...this.releasing].filter((r) => !fed.has(r.seqId))
    return longestSharedRow(seq, rows, cached, this.prefix.blockTokens)
  }

  /** The sequences whose rows the plan being built feeds their prompts (takeovers, restores). */
  private fedRows(): Set<number> {
    return new Set([...this.takeovers, ...this.restores].map((t) => t.seqId))
  }

  /**
   * Whether the next decode step can also feed `seq`'s `rest` (shared-row.ts mayFeed); slot path
   * only. A fed row makes the tick decode, so not where that would hold up better work: a prompt
   * of better priority than every running row is prefilled ahead of their decode step instead
   * (prefillsAhead), and while one is, a worse prompt is not fed.
   */
  private feedsRest(seq: Sequence, rest: number, chunk: number): boolean {
    if (!this.limits.raggedDecode) return false
    if (this.running.length > 0 && this.running.every((r) => r.priority > seq.priority)) return false
    if (this.prefilling.some((p) => p.priority < seq.priority)) return false
    const fed = [...this.takeovers, ...this.restores].map((t) => t.tokens.length)
    return mayFeed(this.running.length - fed.length, fed, rest, chunk)
  }

  /**
   * Fills the prefill chunk: a long prompt in progress keeps it to itself; otherwise waiting
   * sequences are taken in queue order while the batch still fits and the chunk's padded size
   * (count × longest prompt) stays within this tick's `chunk` of tokens (the first one may be
   * longer: it is then sliced over several ticks, alone).
   */
  private admitPrefill(nowMs: number, chunk: number): void {
    if (this.prefilling.length > 0) return
    let longest = 0
    /** This tick's chunk: whole prompts left-padded into one run, or prompts continuing cached prefixes (or rows), one ragged run. */
    let kind: 'padded' | 'continued' | undefined
    let longestRest = 0
    for (;;) {
      const next = this.queue.peek()
      if (!next) return
      const view = { active: this.running.length, waiting: this.queue.length, oldestArrivalMs: next.arrivalMs, nowMs }
      if (this.policy.admissible(view) <= 0) return
      if (next.req.deadlineMs !== undefined && nowMs > next.req.deadlineMs) {
        this.cancel(next, 'error', 'deadline_exceeded')
        continue
      }
      if (!this.mayJoinBatch(next)) return
      if (this.awaitsLeader(next)) return
      // A cached prefix is a past to continue, which the left-padded chunk cannot hold: such
      // prompts share a tick only with each other, as one ragged run (rests padded to the
      // longest) within the chunk.
      const blocks = this.prefixHit(next)
      const donor = this.donorFor(next, blocks * (this.prefix?.blockTokens ?? 0))
      const hit = donor?.tokens ?? blocks * (this.prefix?.blockTokens ?? 0)
      const len = next.tokens.length
      const rest = len - hit
      // A short rest rides on the decode step: in the row it continues when that row is released
      // now (a takeover), else in a new row restored from the cached prefix.
      if (hit > 0 && this.feedsRest(next, rest, chunk)) {
        while (!this.fits(next)) if (!this.preemptFor(next)) return
        this.queue.shift()
        const from = donor && this.releasing.find((s) => s.seqId === donor.seqId)
        if (from) this.takeOver(next, from, hit)
        else this.restore(next, donor)
        continue
      }
      const width = Math.max(longest, len)
      // A worse prompt never shares a better one's chunk: the better one's first token would wait for it.
      if (this.prefilling.some((p) => p.priority < next.priority)) return
      if (hit > 0) {
        if (kind === 'padded' || (kind === 'continued' && (this.prefilling.length + 1) * Math.max(longestRest, rest) > chunk)) return
      } else if (kind === 'continued' || (kind === 'padded' && (this.prefilling.length + 1) * width > chunk)) return
      while (!this.fits(next)) if (!this.preemptFor(next)) return
      this.queue.shift()
      next.state = 'prefilling'
      next.prefilled = 0
      next.reused = 0
      this.reusePrefix(next, donor)
      this.prefilling.push(next)
      this.policy.admitted()
      this.hooks.onScheduled?.(next)
      this.admitForks(next)
      longest = width
      kind = hit > 0 ? 'continued' : 'padded'
      longestRest = Math.max(longestRest, hit > 0 ? rest : 0)
      if ((hit > 0 ? rest : len) > chunk) return
    }
  }

  /**
   * Always true for 'continuous' batching; for the others, when the batch is empty. Beyond that,
   * for 'equal-lengths', when `seq` is a whole prompt (it joins in this tick, after the batch's
   * decode step) with as many tokens as every running and prefilling row has now, so their KV
   * lengths match when it joins.
   */
  private mayJoinBatch(seq: Sequence): boolean {
    const batching = this.limits.batching ?? 'continuous'
    if (batching === 'continuous') return true
    if (this.running.length === 0 && this.prefilling.length === 0) return true
    if (batching === 'alone') return false
    const len = seq.tokens.length
    if (len > this.limits.prefillChunkTokens) return false
    return this.running.every((r) => r.tokens.length === len) && this.prefilling.every((p) => p.tokens.length === len)
  }

  /**
   * Another choice of the same prompt (`n`) waits while its leader's prompt is prefilled: the
   * tick after, the prompt's blocks are in the prefix cache and only its last partial block is
   * computed again. Without the cache, or for a prompt shorter than a block, it would gain nothing.
   */
  private awaitsLeader(seq: Sequence): boolean {
    const leader = seq.leader
    if (!leader || !this.prefix || seq.promptLen < this.prefix.blockTokens) return false
    return leader.state === 'waiting' || leader.state === 'prefilling'
  }

  /**
   * The batch-class rows a tick may hold: `batchRowsBesideInteractive` while interactive work is
   * live (queued, prefilling or running, or gone less than INTERACTIVE_LINGER_MS ago), else no
   * limit. A decode step's time grows with its rows where compute bounds it (a CPU: zl-code's
   * 16-row step takes about twice an 8-row one), and an interactive arrival waits for the step
   * in flight before its prefill runs ahead of the batch; fewer batch rows make that wait
   * shorter, at the cost of batch throughput, and only while interactive requests are there to
   * gain. Rows already running are not preempted for it: they finish, and the batch shrinks as
   * they do.
   */
  private batchRowsAllowed(nowMs: number): number {
    const limit = this.limits.batchRowsBesideInteractive
    if (!limit) return Infinity
    const head = this.queue.peek()
    if ((head && isInteractive(head)) || this.running.some(isInteractive) || this.prefilling.some(isInteractive)) this.interactiveSeenMs = nowMs
    return nowMs - this.interactiveSeenMs < INTERACTIVE_LINGER_MS ? limit : Infinity
  }

  /** Would the batch, with `seq` and those already prefilling joined, stay within the batch cap, the batch-class rows' limit and the KV budget? */
  private fits(seq: Sequence): boolean {
    const rows = this.running.length + this.prefilling.length + 1
    if (!isInteractive(seq) && this.batchRowLimit !== Infinity) {
      const batchRows = this.running.filter((s) => !isInteractive(s)).length + this.prefilling.filter((s) => !isInteractive(s)).length
      if (batchRows >= this.batchRowLimit) return false
    }
    if (rows === 1) return true
    if (rows > this.limits.maxBatch) return false
    let longest = Math.max(this.longestRunning(), seq.tokens.length)
    for (const p of this.prefilling) longest = Math.max(longest, p.tokens.length)
    return rows * (longest + 1) * this.limits.kvBytesPerToken <= this.limits.kvBudgetBytes
  }

  private preemptToFitBudget(): void {
    while (this.running.length > 1 && this.kvBytesNextStep() > this.limits.kvBudgetBytes) this.preempt(latestOfWorst(this.running))
  }

  /**
   * Whether this tick's prefill is of better priority than every running row: the tick then only
   * prefills, so an interactive request's first token does not wait for a decode step of batch
   * rows (they lose one step's time, never a token).
   */
  private prefillsAhead(): boolean {
    if (this.prefilling.length === 0 || this.running.length === 0) return false
    const best = Math.min(...this.prefilling.map((s) => s.priority))
    return this.running.every((r) => r.priority > best)
  }

  /**
   * A waiting request that does not fit takes the place of a running row of worse priority
   * (vLLM's priority scheduling): interactive work never waits behind batch rows for them to end.
   * The row is preempted as for the budget (recomputed later, exactly). False when none is worse.
   */
  private preemptFor(seq: Sequence): boolean {
    const worse = this.running.filter((r) => r.priority > seq.priority)
    if (worse.length === 0) return false
    this.preempt(latestOfWorst(worse))
    return true
  }

  /** Back to the queue, its KV released; it is prefilled again (prompt and output) when readmitted. */
  private preempt(victim: Sequence): void {
    this.evict(victim)
    victim.state = 'waiting'
    victim.prefilled = 0
    this.queue.requeue(victim)
    this.hooks.onPreempted?.(victim)
  }

  private retire(seq: Sequence): void {
    this.evict(seq)
    this.bySeqId.delete(seq.seqId)
    this.speculation?.forget(seq.seqId)
  }

  /** Takes a sequence out of the batch (or prefill) and schedules its KV release; its prefix blocks become evictable. */
  private evict(seq: Sequence): void {
    if (this.prefix && seq.blocks.length > 0) {
      this.prefix.release(seq.blocks)
      seq.blocks = []
    }
    const i = this.running.indexOf(seq)
    if (i !== -1) {
      this.running.splice(i, 1)
      this.releasing.push(seq)
    }
    const p = this.prefilling.indexOf(seq)
    if (p !== -1) this.prefilling.splice(p, 1)
    this.releases.push(seq.seqId)
  }

  private longestRunning(): number {
    let longest = 0
    for (const s of this.running) longest = Math.max(longest, s.tokens.length)
    return longest
  }
}

/** What the model side needs to sample a sequence (its first prefill part's `start`, or a fork's). */
function startOf(seq: Sequence): NonNullable<PrefillPart['start']> {
  const start: NonNullable<PrefillPart['start']> = { sampling: seq.req.sampling, promptLen: seq.promptLen, banEos: seq.req.ignoreEos === true, tokens: seq.tokens.slice() }
  if (seq.req.constraint) start.constraint = seq.req.constraint
  if (seq.req.logprobs) start.logprobs = seq.req.logprobs.top
  return start
}

/** The row to give up first: the worst priority, and of those the latest arrival. */
function latestOfWorst(rows: readonly Sequence[]): Sequence {
  return rows.reduce((worst, s) => (s.priority > worst.priority || (s.priority === worst.priority && s.arrivalSeq > worst.arrivalSeq) ? s : worst))
}
