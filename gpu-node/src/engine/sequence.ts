import { IncrementalDetokenizer, type TokenDecoder } from './detokenizer.ts'
import { StopChecker } from './stop-checker.ts'
import type { CachedBlock } from './prefix-cache.ts'
import type { DonorRow } from '../model/runner.ts'
import type { EngineEvent, EngineRequest, FinishReason, RequestEvent } from './types.ts'
import type { TokenLogprob } from '../../../shared/src/generation.ts'

/** A request's life, in order. */
export type SequenceState = 'waiting' | 'prefilling' | 'running' | 'finished'

/**
 * One request inside the engine: its tokens, where it is, and the text pipeline that turns
 * sampled tokens into events (detokenizer → stop checker → the caller's outbox). Owned by the
 * scheduler; it calls nobody, so the engine decides when events reach their consumers.
 */
export class Sequence {
  state: SequenceState = 'waiting'
  /** Prompt, then every generated token. */
  readonly tokens: number[]
  readonly promptLen: number
  /** Tokens of `tokens` already in this sequence's KV (prefill progress). */
  prefilled = 0
  /** Tokens whose KV the runner holds for this sequence (prompt at join, +1 per decode step). */
  kvLen = 0
  /** Prefix-cache keys of tokens' complete blocks, as far as computed (prefix-cache.ts). */
  readonly chain: string[] = []
  /** Prefix-cache blocks this sequence holds, in chain order: reused at admission, then saved. */
  blocks: CachedBlock[] = []
  /** Tokens reused from the prefix cache at the current admission (its prefill starts after them). */
  reused = 0
  /** The batch row the current admission's prefill starts from instead of cached blocks (scheduler.ts donorFor). */
  donor?: DonorRow
  /** Prompt tokens reused at the first admission: the usage's cachedTokens. */
  cachedTokens?: number
  /** Prompt tokens whose blocks this sequence saved first: the usage's cacheCreationTokens. */
  createdTokens = 0
  readonly arrivalMs: number
  /** The choice of the same prompt whose prefill this one waits for (EngineRequest.after). */
  leader?: Sequence
  /** Admitted with its leader (in its `forks`): its first token is sampled from the leader's prefill, whose KV it copies (no prefill of its own). */
  forked = false
  /** The other choices admitted with this one, joining when its prompt does. */
  forks: Sequence[] = []
  private readonly detok: IncrementalDetokenizer
  private readonly stopper: StopChecker
  private readonly eos: ReadonlySet<number>
  /** Generated tokens whose text has been reported by a text event (or was delivered before a resume). */
  private reported = 0
  /** Log-probability entries of the generated tokens not yet reported. */
  private logprobs: TokenLogprob[] = []
  /** A continuation's delivered texts, one per original event, until their events are out. */
  private replayed: string[] | undefined

  constructor(
    readonly seqId: number,
    readonly arrivalSeq: number,
    readonly req: EngineRequest,
    decoder: TokenDecoder,
    eosTokenIds: readonly number[],
    nowMs: number,
  ) {
    this.tokens = req.promptTokens.slice()
    this.promptLen = req.promptTokens.length
    this.arrivalMs = nowMs
    this.detok = new IncrementalDetokenizer(decoder)
    this.stopper = new StopChecker(req.stop)
    this.eos = new Set(req.ignoreEos ? [] : eosTokenIds)
    if (req.resumeTokens) this.replay(req.resumeTokens)
  }

  /**
   * A continuation's delivered tokens: pushed through the same detokenizer and stop checker as
   * when they were generated, so the state they hold (a partial UTF-8 character, a tail that may
   * still become a stop string) is exactly the original's, and the text they release is dropped
   * (the client has it). They ended no generation originally, so no EOS or stop check applies.
   */
  private replay(delivered: readonly number[]): void {
    // One text per event the original sent: a consumer whose output depends on how the text was
    // split (a numbered event per delta) rebuilds exactly the original's state.
    const texts: string[] = []
    for (const token of delivered) {
      this.tokens.push(token)
      const { emit } = this.stopper.push(this.detok.push(token))
      if (emit) texts.push(emit)
    }
    this.reported = delivered.length
    // The flush frame went out too: what the pipeline holds is already the client's.
    if (this.req.resumeFlushed) {
      const rest = this.stopper.push(this.detok.flush()).emit + this.stopper.flush()
      if (rest) texts.push(rest)
    }
    this.replayed = texts
  }

  /** The replayed texts' events, ahead of the first event after a resume. */
  private emitReplayed(out: RequestEvent[]): void {
    if (this.replayed === undefined) return
    for (const text of this.replayed) out.push({ id: this.req.id, event: { type: 'text', text, completionTokens: this.generated, tokens: [], replayed: true } })
    this.replayed = undefined
  }

  get priority(): number {
    return this.req.priority
  }

  get generated(): number {
    return this.tokens.length - this.promptLen
  }

  /** Appends a sampled token, its text event (if any) to `out`; returns true when the sequence finished. */
  append(token: number, out: RequestEvent[], logprob?: TokenLogprob | null): boolean {
    this.emitReplayed(out)
    // Only a continuation can get here with its budget spent (its stream broke between the last
    // text and the finish): the answer ended at the length limit, as it did originally.
    if (this.generated >= this.req.maxTokens) return this.finish(out, 'length')
    if (this.eos.has(token)) return this.finish(out, 'stop')
    this.tokens.push(token)
    if (logprob) this.logprobs.push(logprob)
    const { emit, stopped } = this.stopper.push(this.detok.push(token))
    if (emit) out.push({ id: this.req.id, event: this.textEvent(emit) })
    if (stopped !== undefined) return this.finish(out, 'stop_sequence', stopped)
    if (this.generated >= this.req.maxTokens) return this.finish(out, 'length')
    return false
  }

  /** A text event for `text`, with the tokens (and their log probabilities) it completes. */
  private textEvent(text: string): Extract<EngineEvent, { type: 'text' }> {
    const event: Extract<EngineEvent, { type: 'text' }> = { type: 'text', text, completionTokens: this.generated, tokens: this.takeReported() }
    if (this.logprobs.length > 0) {
      event.logprobs = this.logprobs
      this.logprobs = []
    }
    return event
  }

  /** The generated tokens not yet reported: all of them have their text in the event being built. */
  private takeReported(): number[] {
    const from = this.promptLen + this.reported
    this.reported = this.generated
    return this.tokens.slice(from)
  }

  /** Ends the sequence once: flushes held text (unless a stop string cut it) and adds `finish` to `out`. */
  finish(out: RequestEvent[], reason: FinishReason, stopSequence?: string, errorCode?: string): true {
    if (this.state === 'finished') return true
    this.state = 'finished'
    this.emitReplayed(out)
    if (reason === 'stop' || reason === 'length') {
      const rest = this.stopper.push(this.detok.flush()).emit + this.stopper.flush()
      if (rest) out.push({ id: this.req.id, event: { ...this.textEvent(rest), flush: true } })
    }
    out.push({ id: this.req.id, event: {
      type: 'finish',
      reason,
      usage: { promptTokens: this.promptLen, completionTokens: this.generated, cachedTokens: this.cachedTokens ?? 0, cacheCreationTokens: this.createdTokens },
      ...(stopSequence !== undefined ? { stopSequence } : {}),
      ...(errorCode ? { error: { code: errorCode } } : {}),
    } })
    return true
  }
}
