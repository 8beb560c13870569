import type { RowDraft } from '../model/runner.ts'
import { MAX_NGRAM, proposeDraft } from './prompt-lookup.ts'

/**
 * Speculative decoding's settings (SPEC_DECODING, SPEC_MAX_DRAFT). `auto`: a step verifies drafts
 * only when the cost model below expects more tokens per second from it; `on`: whenever a row has
 * a draft (tests and benchmarks that need verify steps); `off`: never.
 */
export interface SpeculationSettings {
  mode: 'auto' | 'on' | 'off'
  maxDraft: number
}

/** SPEC_MAX_DRAFT's default: vLLM's n-gram examples verify 4–5 tokens per step. */
export const DEFAULT_SPEC_MAX_DRAFT = 5

/** What drafting reads of a running sequence (a Sequence is one). */
export interface DraftRow {
  seqId: number
  /** Prompt, then every generated token. */
  tokens: readonly number[]
  generated: number
  req: { maxTokens: number }
}

/** Cumulative counts, as vLLM's spec_decode metrics. */
export interface SpeculationStats {
  /** Decode steps that verified drafts. */
  steps: number
  /** Rows that carried a draft, summed over those steps. */
  drafts: number
  /** Draft tokens proposed (verified) and of those accepted. */
  draftTokens: number
  acceptedTokens: number
}

/**
 * A row's acceptance before it has much of its own: the recent acceptance of drafts found by an
 * n-gram of the same length (over all rows; it starts at one accepted and one rejected token),
 * weighing as this many of the row's own tokens. In text that copies nothing, drafts come from
 * one-token matches and are refused: such drafts soon stop costing verify steps, while the long
 * matches of a copied file keep theirs.
 */
const PRIOR_WEIGHT = 2
/** The acceptance by n-gram length forgets at this rate per drafted row. */
const MATCH_DECAY = 0.97
/** Older observations weigh this much less at each new one: a row's recent text decides. */
const ACCEPTANCE_DECAY = 0.8
/** Step cost estimates follow the latest measurements this fast. */
const COST_EWMA = 0.3
/** A verify step must promise this much more than a plain one: a coin flip is not worth its risk. */
const MARGIN = 1.05
/**
 * The most plain steps in one batch size class between two verify steps that re-measure it while
 * speculation looks unprofitable there: costs and acceptance change as contexts grow and texts
 * turn to copying (a request's first drafts refused say little about its later ones).
 */
export const EXPLORE_EVERY = 1024
/**
 * What re-measuring may cost, as a share of a class's time: one cheapest verify step's extra over
 * a plain step per interval. At a large batch, where a width-2 step costs about two plain ones,
 * that is every 200 steps; at batch 1, where it costs a little more than one, every few dozen.
 */
const EXPLORE_SHARE = 0.005
/** The fewest plain steps between two re-measuring steps. */
const EXPLORE_MIN = 16

/**
 * The batch sizes whose step costs are kept together: 1, 2, then up to each power of two. Within
 * one, costs are kept per row (a verify step and a plain step of the same rows compare alike).
 */
export function sizeClass(rows: number): number {
  return rows <= 2 ? rows : 2 ** Math.ceil(Math.log2(rows))
}

/** The next smaller size class (0 below 1). */
const classBelow = (c: number): number => (c <= 2 ? c - 1 : c / 2)

/**
 * Model time of decode steps, measured, per row, by batch size class (sizeClass): plain steps
 * (one token per row) and verify steps by width (tokens per row; ragged rows are padded to the
 * widest). The two are kept apart because a runtime may take another kernel for one token than
 * for several (ONNX Runtime on CPU: a single-row product for one, blocked matrix products for
 * more), so a plain step says little about a verify step's cost. A verify width not measured in a
 * class is estimated from the widths measured there: a line through the two nearest (never below
 * a narrower one's cost), or from one, its cost for a narrower width (the switch of kernels is
 * most of it) and, for a wider one, growing as the square root of the width (between free and
 * proportional).
 */
export class StepCosts {
  private readonly plainMs = new Map<number, number>()
  private readonly verifyMs = new Map<number, Map<number, number>>()

  observe(rows: number, width: number, ms: number): void {
    const perRow = ms / rows
    if (width === 1) return ewma(this.plainMs, sizeClass(rows), perRow)
    let byWidth = this.verifyMs.get(sizeClass(rows))
    if (!byWidth) this.verifyMs.set(sizeClass(rows), (byWidth = new Map()))
    ewma(byWidth, width, perRow)
  }

  /** The estimated ms of a plain step of `rows`; undefined when none was measured in its class. */
  plain(rows: number): number | undefined {
    const perRow = this.plainMs.get(sizeClass(rows))
    return perRow === undefined ? undefined : perRow * rows
  }

  /**
   * The estimated ms of a verify step of `rows` × `width`, from its class's verify steps. A class
   * with none yet borrows the largest smaller class's ratio of verify to plain cost (a verify step
   * is relatively dearest at large batches, so this errs cheap: the step that follows measures
   * it), or, with none smaller measured, takes a verify step to cost a plain one. Undefined before
   * a plain step of the class was measured.
   */
  verify(rows: number, width: number): number | undefined {
    const plain = this.plain(rows)
    if (plain === undefined) return undefined
    // Never below a plain step's: a cheaper verify step is a noisy measurement, not a saving.
    const own = this.perRowVerify(sizeClass(rows), width)
    if (own !== undefined) return Math.max(own * rows, plain)
    let ratio = 1
    for (let c = classBelow(sizeClass(rows)); c >= 1; c = classBelow(c)) {
      const v = this.perRowVerify(c, width)
      if (v !== undefined && this.plainMs.has(c)) {
        ratio = v / this.plainMs.get(c)!
        break
      }
    }
    return plain * Math.max(1, ratio)
  }

  /** Whether a verify step was measured in `rows`' class. */
  measured(rows: number): boolean {
    return (this.verifyMs.get(sizeClass(rows))?.size ?? 0) > 0
  }

  private perRowVerify(cls: number, width: number): number | undefined {
    const byWidth = this.verifyMs.get(cls)
    if (!byWidth || byWidth.size === 0) return undefined
    const exact = byWidth.get(width)
    if (exact !== undefined) return exact
    const [a, b] = [...byWidth.keys()].sort((x, y) => Math.abs(x - width) - Math.abs(y - width) || x - y) as [number, number | undefined]
    const ta = byWidth.get(a)!
    if (b === undefined) return width < a ? ta : ta * Math.sqrt(width / a)
    const tb = byWidth.get(b)!
    let floor = 0
    for (const [w, t] of byWidth) if (w < width) floor = Math.max(floor, t)
    return Math.max(ta + ((tb - ta) * (width - a)) / (b - a), floor)
  }
}

/** Decayed counts of accepted and refused draft tokens (one refusal ends a draft). */
interface Counts {
  accepted: number
  rejected: number
}

function decay(c: Counts, rate: number, accepted: number, rejected: number): void {
  c.accepted = c.accepted * rate + accepted
  c.rejected = c.rejected * rate + rejected
}

/** Expected accepted tokens of a draft of `k` at per-token acceptance `a`: a + a² + … + a^k. */
function geometric(a: number, k: number): number {
  let sum = 0
  let p = 1
  for (let i = 0; i < k; i++) sum += p *= a
  return sum
}

function ewma(m: Map<number, number>, key: number, ms: number): void {
  const old = m.get(key)
  m.set(key, old === undefined ? ms : old + COST_EWMA * (ms - old))
}

/**
 * Decides each decode step's drafts (prompt lookup, per row) and learns from each step: its cost,
 * and every drafted row's acceptance. A step verifies drafts of length k when its expected tokens
 * per ms beat a plain step's: rows + Σ_rows Σ_{i≤k} a^i tokens (a: the row's recent per-token
 * acceptance) over the measured cost of a step of width k + 1 at this batch size. So drafts run
 * where they pay (a small batch copying from its prompt) and stay off where they do not (a large
 * batch, text that copies nothing). A batch size with no verify step measured yet has its cost
 * estimated from smaller ones (StepCosts.verify) and is tried at its cheapest width, one draft
 * token, which measures it; one that ran none for a while (exploreEvery) gets that cheapest
 * verify step again, to measure anew.
 */
export class Speculation {
  readonly costs = new StepCosts()
  readonly stats: SpeculationStats = { steps: 0, drafts: 0, draftTokens: 0, acceptedTokens: 0 }
  /** Per running sequence: decayed counts of accepted and rejected draft tokens. */
  private readonly acceptance = new Map<number, Counts>()
  /** The same by the length of the n-gram that found the draft, over all rows (index: length). */
  private readonly byMatch: Counts[] = Array.from({ length: MAX_NGRAM + 1 }, () => ({ accepted: 1, rejected: 1 }))
  /** This step's drafts: the n-gram length that found each row's. */
  private readonly matched = new Map<number, number>()
  /** Per batch size class: plain steps since the last verify step. */
  private readonly sinceVerify = new Map<number, number>()

  constructor(readonly settings: SpeculationSettings) {}

  /**
   * The drafts for a decode step over `rows`, at most `maxWidth` tokens fed per row (the KV
   * budget's room): none when speculation would not pay. A row gets no draft past its
   * max_tokens (its first token is always sampled, each accepted draft adds one). `othersWait`:
   * the tick also prefills, or requests are queued; `auto` then verifies nothing, since a wider
   * step would hold back their first tokens (the running rows lose one step's gain, no more).
   */
  plan(rows: readonly DraftRow[], maxWidth: number, othersWait = false): RowDraft[] {
    const { mode, maxDraft } = this.settings
    const cap = Math.min(maxDraft, maxWidth - 1)
    if (mode === 'off' || (mode === 'auto' && othersWait) || cap <= 0 || rows.length === 0) return []
    const drafts: RowDraft[] = []
    this.matched.clear()
    for (const seq of rows) {
      const room = Math.min(cap, seq.req.maxTokens - seq.generated - 1)
      if (room <= 0) continue
      const draft = proposeDraft(seq.tokens, room)
      if (!draft) continue
      drafts.push({ seqId: seq.seqId, tokens: draft.tokens })
      this.matched.set(seq.seqId, draft.ngram)
    }
    if (drafts.length === 0) return []
    const k = mode === 'on' ? cap : this.bestLength(rows.length, drafts)
    if (k === 0) {
      // A row's own refusals fade while it runs without verifying, back to the prior of its
      // drafts' n-gram length: a copy that went astray for a few tokens is tried again once it
      // is back on track, and a row whose drafts come from one-token matches stays off.
      for (const d of drafts) {
        const own = this.acceptance.get(d.seqId)
        if (own) decay(own, ACCEPTANCE_DECAY, 0, 0)
      }
      return []
    }
    for (const d of drafts) d.tokens.length = Math.min(d.tokens.length, k)
    return drafts
  }

  /**
   * The draft length that maximises expected tokens per ms, or 0 when a plain step is best. A
   * class whose verify steps were measured but that ran none for exploreEvery plain steps gets
   * one of the shortest drafts: its cheapest verify step, to measure again (cost and acceptance).
   */
  private bestLength(rows: number, drafts: readonly RowDraft[]): number {
    const plain = this.costs.plain(rows)
    if (plain === undefined) return 0
    if (this.costs.measured(rows) && (this.sinceVerify.get(sizeClass(rows)) ?? 0) >= this.exploreEvery(rows, plain)) return 1
    const longest = drafts.reduce((m, d) => Math.max(m, d.tokens.length), 0)
    const rates = drafts.map((d) => this.rate(d.seqId))
    const expected = (k: number) => drafts.reduce((sum, d, r) => sum + geometric(rates[r]!, Math.min(k, d.tokens.length)), rows)
    let best = 0
    let bestRate = (rows / plain) * MARGIN
    // A class not measured yet is tried at its cheapest width: at a large batch a step costs about
    // its tokens, and the estimate it borrowed could be several times too low there.
    for (let k = 1; k <= (this.costs.measured(rows) ? longest : 1); k++) {
      const rate = expected(k) / this.costs.verify(rows, k + 1)!
      if (rate > bestRate) {
        best = k
        bestRate = rate
      }
    }
    return best
  }

  /** Plain steps between two re-measuring verify steps in `rows`' class: EXPLORE_SHARE of its time. */
  private exploreEvery(rows: number, plain: number): number {
    const extra = this.costs.verify(rows, 2)! / plain - 1
    return Math.min(EXPLORE_EVERY, Math.max(EXPLORE_MIN, Math.round(extra / EXPLORE_SHARE)))
  }

  /** A row's estimated chance that a draft token is accepted, given the ones before it were. */
  private rate(seqId: number): number {
    const own = this.acceptance.get(seqId) ?? { accepted: 0, rejected: 0 }
    const match = this.byMatch[this.matched.get(seqId) ?? MAX_NGRAM]!
    const prior = match.accepted / (match.accepted + match.rejected)
    return (own.accepted + PRIOR_WEIGHT * prior) / (own.accepted + own.rejected + PRIOR_WEIGHT)
  }

  /** A decode step over `rows` ran `width` tokens per row (1: plain) in `ms` of model time (undefined: not a measure of that width). */
  observeStep(rows: number, width: number, ms: number | undefined): void {
    if (ms !== undefined) this.costs.observe(rows, width, ms)
    const c = sizeClass(rows)
    if (width > 1) {
      this.stats.steps++
      this.sinceVerify.set(c, 0)
    } else this.sinceVerify.set(c, (this.sinceVerify.get(c) ?? 0) + 1)
  }

  /** A row's draft of `proposed` tokens had its first `accepted` accepted. */
  observeRow(seqId: number, proposed: number, accepted: number): void {
    const refused = accepted < proposed ? 1 : 0
    const a = this.acceptance.get(seqId) ?? { accepted: 0, rejected: 0 }
    decay(a, ACCEPTANCE_DECAY, accepted, refused)
    this.acceptance.set(seqId, a)
    const n = this.matched.get(seqId)
    if (n !== undefined) decay(this.byMatch[n]!, MATCH_DECAY, accepted, refused)
    this.stats.drafts++
    this.stats.draftTokens += proposed
    this.stats.acceptedTokens += accepted
  }

  /** A sequence ended (finished or cancelled): its acceptance is forgotten. A preempted one keeps it. */
  forget(seqId: number): void {
    this.acceptance.delete(seqId)
  }
}
