import type { OutputConstraint, SamplingParams, TokenLogprob } from '../../../shared/src/generation.ts'
import type { KvPath } from './kv-path.ts'
import type { LogitsPath } from './last-logits-edit.ts'
import type { ModelDir } from './model-dir.ts'
import { bytesPerElement, type KvType } from './tensor-dtype.ts'

/** Shapes the scheduler needs to budget KV and bound sequences. */
export interface ModelInfo {
  vocabSize: number
  numLayers: number
  numKvHeads: number
  headDim: number
  /** Max prompt + generated tokens per sequence. */
  contextLength: number
  /** KV cache bytes per token per sequence: 2 (K and V) × layers × kv heads × head dim × the KV type's bytes. */
  kvBytesPerToken: number
  kvType: KvType
  eosTokenIds: number[]
  /** Which rows may share a batch without changing a token (see Batching). */
  batching: Batching
  /** Why batching is not 'continuous', for the node's start-up log. */
  batchingWhy?: string
  /** The KV interface the worker drives the graph through, and why (start-up log). */
  kvPath?: KvPath
  /** Whether a step computes logits only for the positions it samples, and why (start-up log). */
  logitsPath?: LogitsPath
  /** The runner verifies draft tokens in a decode step (StepPlan `drafts`): the slot KV path, continuous batching. */
  speculation?: boolean
}

/**
 * How rows may share a batch exactly. 'continuous': any rows, since each row's positions are
 * fed (position_ids). 'equal-lengths': the graph has no position_ids input and derives
 * positions from the past length, the same for every row, so a left-padded (shorter) row would
 * be shifted: only rows of one length may share a step (scheduler.ts).
 */
export type Batching = 'continuous' | 'equal-lengths' | 'alone'


/** The KV shape as the session declares it (see session-io.ts). */
export interface KvShape {
  numLayers: number
  numKvHeads: number
  headDim: number
  kvType: KvType
}

/** What the worker reports of the loaded session: its KV shape, whether it takes positions, and the batch-coupling operators it uses. */
export interface SessionShape extends KvShape {
  hasPositionIds: boolean
  /** The graph's operators that couple a batch's rows (graph-ops.ts batchCouplingOps). */
  couplingOps: string[]
  /** The KV interface the session is driven through (session-io.ts). */
  kvCache?: 'slots' | 'concat'
  kvPath?: KvPath
  logitsPath?: LogitsPath
}

/** KV cache bytes per token per sequence: 2 (K and V) × layers × kv heads × head dim × the KV type's bytes (float16: half of float32's). */
export function kvBytesPerToken(kv: KvShape): number {
  return 2 * kv.numLayers * kv.numKvHeads * kv.headDim * bytesPerElement(kv.kvType)
}

export function toModelInfo(dir: ModelDir, session: SessionShape): ModelInfo {
  const { numLayers, numKvHeads, headDim, kvType } = session
  const kv = { numLayers, numKvHeads, headDim, kvType }
  const batching = batchingOf(session)
  return {
    vocabSize: dir.config.vocabSize,
    ...kv,
    contextLength: dir.config.contextLength,
    kvBytesPerToken: kvBytesPerToken(kv),
    eosTokenIds: dir.eosTokenIds,
    ...batching,
    ...(session.kvPath ? { kvPath: session.kvPath } : {}),
    // Drafts are verified as ragged rows of the slot cache; the concat cache's rows are left-padded to one width.
    ...((session.kvCache ?? session.kvPath?.kvCache) === 'slots' && batching.batching === 'continuous' ? { speculation: true } : {}),
    ...(session.logitsPath ? { logitsPath: session.logitsPath } : {}),
  }
}

function batchingOf(session: SessionShape): Pick<ModelInfo, 'batching' | 'batchingWhy'> {
  if (session.couplingOps.length > 0) {
    return { batching: 'alone', batchingWhy: `the graph uses ${session.couplingOps.join(', ')} (one quantization scale over the whole batch), so a row's tokens would depend on its batch; each sequence runs alone (exact, one at a time)` }
  }
  if (!session.hasPositionIds) {
    return { batching: 'equal-lengths', batchingWhy: 'the ONNX graph takes no position_ids: its positions follow the past length, so a left-padded row would be shifted; sequences share a step only when their lengths are equal (exact, less concurrent). Re-export with position_ids for continuous batching.' }
  }
  return { batching: 'continuous' }
}

/** Sent with a sequence's first prefill chunk: what the model side needs to sample it. */
export interface SequenceStart {
  sampling: SamplingParams
  /** Tokens of the sequence that are prompt (penalties treat them differently from output). */
  promptLen: number
  /** Never sample EOS (benchmarks that need a fixed length); a constrained sequence ends where its grammar does. */
  banEos: boolean
  /** The grammar every token is chosen within (structured/grammars.ts); the tokens after promptLen are replayed into it. */
  constraint?: OutputConstraint
  /** Report each sampled token's log probability and this many alternatives (sampling/logprobs.ts). */
  logprobs?: number
  /**
   * Prefix-cache slots (in order) whose saved KV is the sequence's first prefix.length ×
   * prefixBlockTokens tokens: its prefill starts from them and computes only the rest.
   */
  prefix?: number[]
  /**
   * Instead of `prefix`: a batch row whose first `tokens` tokens are the sequence's own first ones
   * (a request continuing one that runs or was just released: an editor's next keystroke). Its
   * KV is copied before this plan's releases, so a row released by the same plan may give it.
   */
  donor?: DonorRow
}

/** A batch row whose first `tokens` tokens another sequence starts from (SequenceStart `donor`). */
export interface DonorRow {
  seqId: number
  tokens: number
}

/** Tokens per prefix-cache block when PREFIX_BLOCK_TOKENS is not set: the scheduler and the worker must agree. */
export const DEFAULT_PREFIX_BLOCK_TOKENS = 16

/** Copies a batch row's KV for tokens [from, from + prefixBlockTokens) into a prefix-cache slot. */
export interface BlockSave {
  seqId: number
  from: number
  slot: number
}

/** One sequence's share of a prefill chunk. */
export interface PrefillPart {
  seqId: number
  tokens: number[]
  /** The sequence's prompt is complete after this part: sample its first token, join the batch. */
  last: boolean
  /** Present on a sequence's first part. */
  start?: SequenceStart & { tokens: number[] }
  /**
   * On a last part: other sequences with the same prompt (OpenAI `n`) that join with this one,
   * each sampling its first token from this prompt's last logits and copying its KV.
   */
  forks?: Array<{ seqId: number; start: SequenceStart & { tokens: number[] } }>
}

/**
 * A sequence that takes over a batch row this plan would otherwise release (the request it
 * supersedes, or one that just finished), instead of a prefill of its own: the row keeps its
 * first `keep` tokens (the sequence's own first ones) and becomes `seqId`'s, and the decode step
 * feeds it `tokens` (the rest of its prompt) and samples its first token after the last of them.
 */
export interface Takeover {
  from: number
  seqId: number
  keep: number
  tokens: number[]
  start: SequenceStart & { tokens: number[] }
}

/**
 * A sequence that joins the batch as a new row holding its cached prefix, instead of a prefill:
 * the row is restored from prefix-cache blocks (`prefix`, their slots) or from a copy of a
 * running row's first `donor.tokens`, and the decode step feeds it `tokens` (the rest of its
 * prompt) and samples its first token after the last of them, as for a takeover.
 */
export interface Restore {
  seqId: number
  prefix?: number[]
  donor?: DonorRow
  tokens: number[]
  start: SequenceStart & { tokens: number[] }
}

/**
 * One scheduler tick, as plain data. Applied in this order by the runner: `save` (prefix-cache
 * blocks out of the batch rows, before any row is released) and the `donor` rows of prefill starts
 * and restores → `takeover` (rows renamed and cut) → `release` (drop KV and sampler state) →
 * `restore` (new rows after the others) → one decode step over every batch row → the prefill
 * chunk. A chunk is either one part of one sequence's prompt (long prompts, split over ticks) or
 * several whole short prompts run as one left-padded batch; every part that is `last` gets its
 * first token sampled and joins the batch.
 */
export interface StepPlan {
  save?: BlockSave[]
  release: number[]
  decode: boolean
  /**
   * Speculative decoding: rows whose decode step also verifies these draft tokens (fed after the
   * row's next token in the same run). The row samples each position in turn and keeps its
   * tokens while they equal the draft's; rows without one decode as usual in the same run.
   */
  drafts?: RowDraft[]
  /** Set only with `decode`: the step that feeds them. */
  takeover?: Takeover[]
  /** Set only with `decode`, as `takeover`. */
  restore?: Restore[]
  prefill: PrefillPart[]
}

/** One row's draft in a plan: the tokens the runner verifies after the row's next token. */
export interface RowDraft {
  seqId: number
  tokens: number[]
}

export interface SampledTokens {
  seqIds: number[]
  tokens: number[]
  logprobs?: Array<TokenLogprob | null>
  /**
   * A verify step's further tokens per row, after `tokens[i]` (one per accepted draft token; empty
   * for a row whose draft's first token was refused or that had none), with their log-probability
   * entries when the row asked.
   */
  more?: number[][]
  moreLogprobs?: Array<Array<TokenLogprob | null>>
}

export interface StepResult {
  /** One sampled token per batch row that was decoded; `logprobs` when a row asked (null for the others). */
  decoded: SampledTokens
  /** First tokens of the sequences whose prefill completed in this step (they joined the batch). */
  joined: SampledTokens
  /** Rows resident in the batch KV cache after the step, and its length in tokens. */
  kvRows: number
  kvTokens: number
  /** Wall time inside ONNX Runtime for the decode and prefill runs. */
  decodeMs: number
  prefillMs: number
}

/** The model side of the engine: ONNX Runtime in a worker thread, or a test double. */
export interface ModelRunner {
  readonly info: ModelInfo
  step(plan: StepPlan): Promise<StepResult>
  /** Compiles a constraint's grammar ahead of the sequence that needs it; rejects when it cannot be compiled. Absent: no structured output. */
  prepare?(constraint: OutputConstraint): Promise<void>
  close(): Promise<void>
}
