/**
 * Engine-side types: what the HTTP layer hands the engine and what the engine emits back.
 * Wire types (dialect bodies) live in shared/; they are parsed into GenerateRequest by the
 * server and into EngineRequest by the engine.
 */

import type { FinishReason, OutputConstraint, SamplingParams, TokenLogprob, Usage } from '../../../shared/src/generation.ts'
import type { PrefixCacheStats } from './prefix-cache.ts'
import type { SpeculationSettings, SpeculationStats } from './speculation.ts'

export type { FinishReason, SamplingParams, Usage }
export { GREEDY } from '../../../shared/src/generation.ts'

/**
 * The engine's limits, parsed once from the environment (config.ts) and passed through unchanged:
 * every layer uses these names and units.
 */
export interface EngineLimits {
  /** Max sequences resident in the batch (running + prefilling). */
  maxBatch: number
  /** Max sequences waiting for admission; new requests beyond it are refused. */
  maxQueue: number
  /** Max KV bytes one decode step may touch: rows × padded length × bytes per token. */
  kvBudgetBytes: number
  /** Tokens per prefill chunk (one long prompt's slice, or several short prompts padded to one width) while as many rows decode as prompts wait; the scheduler's chunkFor scales it for a burst. */
  prefillChunkTokens: number
  /** The automatic prefix cache's own KV budget, beside kvBudgetBytes; 0 or absent: off (prefix-cache.ts). */
  prefixCacheBytes?: number
  /** Tokens per prefix-cache block (default 16). */
  prefixBlockTokens?: number
  /**
   * A new request is refused (overloaded, with the estimate as retry-after-ms) when the estimated
   * wait before its first token exceeds this; 0 or absent: only maxQueue bounds the queue.
   */
  maxQueueWaitMs?: number
  /** Speculative decoding by prompt lookup (SPEC_DECODING, SPEC_MAX_DRAFT); absent: off. */
  speculation?: SpeculationSettings
  /**
   * The most batch-class rows (priority at or past CLASS_PRIORITY.batch) admitted to the batch
   * while interactive work is live (scheduler.ts, BATCH_ROWS_BESIDE_INTERACTIVE); absent: no limit.
   */
  batchRowsBesideInteractive?: number
}

/** A generation request as the engine sees it: tokens in, stop rules, sampling. */
export interface EngineRequest {
  /** Unique per request (the x-request-id, or a generated one). */
  id: string
  promptTokens: number[]
  maxTokens: number
  stop: string[]
  sampling: SamplingParams
  /** Lower runs first. */
  priority: number
  /** Epoch ms after which the request may be dropped; undefined means none. */
  deadlineMs?: number
  /** Skip EOS (for benchmarks that need a fixed number of tokens). */
  ignoreEos?: boolean
  /** What the output must match (structured output): each token is chosen among those the grammar allows. */
  constraint?: OutputConstraint
  /** Report each generated token's log probability and this many alternatives (text events' `logprobs`). */
  logprobs?: { top: number }
  /** Prefix-cache salt: requests reuse each other's cached blocks only when their salts are equal (the tenant). */
  cacheSalt?: string
  /**
   * A continuation (resume-wire.ts): tokens already generated and delivered elsewhere. They join
   * the sequence as generated tokens (prefilled after the prompt, counted in usage, replayed
   * through the sampler and the text pipeline) and their text is never emitted again.
   */
  resumeTokens?: number[]
  /** The client also has the text the finish flush released after resumeTokens: flush silently after the replay. */
  resumeFlushed?: boolean
  /**
   * Another choice of the same prompt (OpenAI `n`), submitted before this one: this request joins
   * with it as a fork (its first token sampled from that prompt's prefill, whose KV it copies);
   * when it could not be admitted with it, it waits until that prompt has joined and takes its KV
   * from the prefix cache (with the cache on and a prompt of a block or more).
   */
  after?: string
}

/** What a request's consumer receives, in order: zero or more `text`, then exactly one `finish`. */
export type EngineEvent =
  /** `tokens`: the generated ids whose text this event completes (since the previous text event). */
  /** `flush`: the text held to the end, released as the sequence finishes. */
  /** `replayed`: a continuation's delivered text, event by event as it was first sent, before anything new: the client has it; consumers rebuild their state from it and send nothing. */
  | { type: 'text'; text: string; completionTokens: number; tokens: number[]; flush?: true; replayed?: true; logprobs?: TokenLogprob[] }
  | { type: 'finish'; reason: FinishReason; usage: Usage; stopSequence?: string; error?: { code: string } }

/** An event and the request it belongs to, as the scheduler returns them for the engine to deliver. */
export interface RequestEvent {
  id: string
  event: EngineEvent
}

/** Live numbers for /metrics, heartbeats and overload answers. */
export interface EngineStats {
  running: number
  waiting: number
  maxBatch: number
  /** KV bytes the running batch touches per step over the budget, 0..1. */
  kvUsedFrac: number
  /** Generated tokens per second over the last few seconds. */
  tokPerSec: number
  /** Prompt tokens per second of prefill model time, smoothed over recent chunks; 0 until one ran. */
  prefillTokPerSec: number
  draining: boolean
  /** The automatic prefix cache, when on: cumulative token counts, and what it holds now. */
  prefixCache?: PrefixCacheStats & { bytes: number; capacityBytes: number }
  /** Speculative decoding, when on: cumulative counts. */
  speculation?: SpeculationStats
}

export type SubmitResult = { ok: true } | { ok: false; code: 'overloaded'; retryAfterMs: number } | { ok: false; code: 'draining'; retryAfterMs: number }

/** Timing the engine reports so the server can keep Prometheus histograms without the engine knowing prom-client. */
export interface EngineObserver {
  /** One scheduler tick: model time and rows run. */
  onStep?(step: { durationMs: number; decodeRows: number; prefillRows: number; prefillTokens: number }): void
  /** A request left the queue and started prefill. */
  onScheduled?(id: string, queueMs: number): void
  /** A sequence was preempted (its KV freed, to be recomputed later). */
  onPreempted?(id: string): void
  /**
   * An aborted request's KV was freed, or its batch row taken over by another request:
   * `steps` counts the model steps started after abort()
   * was called, up to and including the one that released it: normally 1, since a step already
   * in flight when abort() is called is not counted (the release rides on the next one).
   */
  onAbortFreed?(id: string, steps: number): void
}

/**
 * What the HTTP layer may do with the engine: submit and abort. Both take effect between
 * steps; `onEvent` is called on the main thread, `text` events then exactly one `finish`.
 */
export interface EngineHandle {
  submit(req: EngineRequest, onEvent: (event: EngineEvent) => void): SubmitResult
  /** Readies a constraint's grammar before its request is submitted; rejects when it cannot be compiled or the runner has no structured output. */
  prepare(constraint: OutputConstraint): Promise<void>
  abort(id: string): void
  stats(): EngineStats
  /** Stop admitting; resolves when every admitted request has finished. */
  drain(): Promise<void>
  close(): Promise<void>
}
