import { performance } from 'node:perf_hooks'
import * as ort from 'onnxruntime-node'
import { SequenceSampler } from '../sampling/sampler.ts'
import { BatchKvCache, ConcatPrefill, emptyLayers, modelFeeds, presentsOf, type BatchCache, type KvJoin, type PrefillCache } from './batch-kv-cache.ts'
import type { SessionIo } from './session-io.ts'
import { DEFAULT_PREFIX_BLOCK_TOKENS, type PrefillPart, type RowDraft, type StepPlan, type StepResult, type DonorRow } from './runner.ts'
import { KvBufferSet } from './kv-buffer-set.ts'
import { SlotKvCache } from './slot-kv-cache.ts'
import { floatsOf } from './tensor-dtype.ts'
import { tokensIn, type KvBlock } from './kv-block.ts'
import type { GrammarConstraint } from '../structured/grammar-constraint.ts'
import type { Grammars } from '../structured/grammars.ts'
import type { TokenLogprob } from '../../../shared/src/generation.ts'
import { tokenLogprob, type TokenPiece } from '../sampling/logprobs.ts'

/**
 * Executes StepPlans against an ONNX Runtime session: the batch cache, the prefill caches and
 * the per-sequence samplers all live here, beside the logits, so only token ids cross threads.
 */
export class ModelStep {
  private readonly batch: BatchCache
  /** Sequences between their first and last prefill chunk, each with its own B=1 cache. */
  private readonly prefilling = new Map<number, PrefillCache>()
  private readonly samplers = new Map<number, SequenceSampler>()
  /** Constrained sequences' grammar states (structured output). */
  private readonly constraints = new Map<number, GrammarConstraint>()
  /** Sequences that report log probabilities: how many alternatives each. */
  private readonly logprobRows = new Map<number, number>()
  /** This step's joining sequences' first-token entries. */
  private readonly joinLogprobs = new Map<number, TokenLogprob>()
  private readonly tokenPiece: TokenPiece | undefined
  private readonly vocabSize: number
  private readonly grammars: Grammars | undefined
  private readonly kvBudgetBytes: number
  /** The prefix cache's blocks by slot (the engine's prefix-cache.ts decides which). */
  private readonly blocks = new Map<number, KvBlock>()
  /** Donor rows' copies (SequenceStart `donor`), from the start of a plan to the prefill that starts from them. */
  private readonly donated = new Map<number, KvBlock>()
  private readonly prefixBlockTokens: number
  /** An emptied batch's KV buffers, for the next slot cache (kv-buffer-set.ts). */
  private readonly buffers: KvBufferSet

  constructor(
    private readonly session: ort.InferenceSession,
    private readonly io: SessionIo,
    private readonly eosTokenIds: number[],
    opts: {
      /** Injectable so a test can prove that wrong positions would be caught. */
      batch?: BatchCache
      /** Injectable so a test can prove that trusting changed kept buffers would be caught. */
      buffers?: KvBufferSet
      /** The scheduler's KV budget: slot caches take spare rows and slots only inside it. */
      kvBudgetBytes?: number
      /** Tokens per prefix-cache block (the engine's PREFIX_BLOCK_TOKENS). */
      prefixBlockTokens?: number
      /** The model's grammars (structured output); without them a constrained sequence is refused. */
      grammars?: Grammars
      /** A token's text and bytes (log probabilities); without it they are refused. */
      tokenPiece?: TokenPiece
      /** Tokens the tokenizer has: logits past it (a padded vocabulary) are no token. */
      vocabSize?: number
    } = {},
  ) {
    this.grammars = opts.grammars
    this.tokenPiece = opts.tokenPiece
    this.vocabSize = opts.vocabSize ?? Infinity
    this.kvBudgetBytes = opts.kvBudgetBytes ?? Infinity
    this.prefixBlockTokens = opts.prefixBlockTokens ?? DEFAULT_PREFIX_BLOCK_TOKENS
    this.buffers = opts.buffers ?? new KvBufferSet(io.kvType)
    this.batch = this.bounded(opts.batch ?? (io.kvCache === 'slots' ? new SlotKvCache(io) : new BatchKvCache(io)))
  }

  async run(plan: StepPlan): Promise<StepResult> {
    // Before any release: a finishing sequence's last blocks are saved from its row.
    // An evicted slot's buffers are written over in place: a full cache saves without allocating.
    for (const s of plan.save ?? []) this.blocks.set(s.slot, this.batch.readBlock(s.seqId, s.from, this.prefixBlockTokens, this.blocks.get(s.slot)))
    const takeovers = plan.takeover ?? []
    const restores = plan.restore ?? []
    // A donor row may be released by this very plan: its tokens are copied first.
    for (const p of plan.prefill) if (p.start?.donor) this.donate(p.seqId, p.start.donor)
    for (const r of restores) if (r.donor) this.donate(r.seqId, r.donor)
    // Rows of several tokens in one decode step (drafts, takeovers, restores) need the slot cache.
    const slots = this.batch instanceof SlotKvCache ? this.batch : undefined
    if (takeovers.length + restores.length > 0 && !(slots && plan.decode)) throw new Error('a takeover or a restore needs the slot cache and a decode step')
    for (const t of takeovers) {
      this.forget(t.from)
      slots!.takeOver(t.from, t.seqId, t.keep)
      await this.prepareSampling(t.seqId, t.start)
    }
    const released = new Set(plan.release)
    for (const id of released) this.forget(id)
    this.batch.relayout(released)
    if (restores.length > 0) {
      for (const r of restores) await this.prepareSampling(r.seqId, r.start)
      // Room for the step's widest row: a restore's rest, a takeover's, a draft after its token.
      const width = Math.max(1, ...restores.map((r) => r.tokens.length), ...takeovers.map((t) => t.tokens.length), ...(plan.drafts ?? []).map((d) => d.tokens.length + 1))
      slots!.addRows(restores.map((r) => r.seqId), restores.map((r) => this.startBlocks(r.seqId, r)), width)
    }
    const result: StepResult = { decoded: { seqIds: [], tokens: [] }, joined: { seqIds: [], tokens: [] }, kvRows: 0, kvTokens: 0, decodeMs: 0, prefillMs: 0 }
    if (plan.decode && this.batch.rows > 0) {
      const t0 = performance.now()
      const fed = [...takeovers, ...restores]
      result.decoded = slots && (plan.drafts?.length || fed.length) ? await this.verify(slots, plan.drafts ?? [], fed) : await this.decode()
      result.decodeMs = performance.now() - t0
    }
    if (plan.prefill.length > 0) {
      const t0 = performance.now()
      const joins =
        plan.prefill.length === 1 ? await this.prefillOne(plan.prefill[0])
        : plan.prefill.some(continues) ? await this.prefillEach(plan.prefill)
        : await this.prefillMany(plan.prefill)
      this.batch.relayout(new Set(), joins)
      result.joined = { seqIds: joins.map((j) => j.seqId), tokens: joins.map((j) => j.nextToken) }
      if (this.joinLogprobs.size > 0) {
        result.joined.logprobs = joins.map((j) => this.joinLogprobs.get(j.seqId) ?? null)
        this.joinLogprobs.clear()
      }
      result.prefillMs = performance.now() - t0
    }
    result.kvRows = this.batch.rows
    result.kvTokens = this.batch.width
    return result
  }

  private async decode(): Promise<StepResult['decoded']> {
    const outputs = await this.session.run(this.batch.decodeFeeds())
    this.batch.acceptDecode(outputs)
    const seqIds = this.batch.seqIds.slice()
    // Plain rows (no grammar, no log probabilities) are sampled without a promise each.
    const picked =
      this.constraints.size === 0 && this.logprobRows.size === 0
        ? seqIds.map((id, r) => ({ token: this.samplerOf(id).sample(this.lastLogits(outputs, r)), logprob: undefined }))
        : await Promise.all(seqIds.map((id, r) => this.choose(id, this.lastLogits(outputs, r))))
    const tokens = picked.map((p) => p.token)
    tokens.forEach((token, r) => (this.batch.nextTokens[r] = token))
    return this.logprobRows.size === 0 ? { seqIds, tokens } : { seqIds, tokens, logprobs: picked.map((p) => p.logprob ?? null) }
  }

  /**
   * A decode step that verifies drafts (speculative decoding): each row feeds its next token and
   * its draft, ragged, in one run. A row then samples position after position, exactly as plain
   * decode steps would one at a time (the same sampler and grammar state, the counter-based draw
   * of each generated index), and stops at the first token that differs from its draft's next, or
   * after its last: those tokens are what plain decoding would have produced. The KV kept is that
   * of the tokens fed up to there; the last token sampled is fed next.
   */
  private async verify(cache: SlotKvCache, drafts: readonly RowDraft[], promptRows: ReadonlyArray<{ seqId: number; tokens: number[] }>): Promise<StepResult['decoded']> {
    const byId = new Map(drafts.map((d) => [d.seqId, d.tokens]))
    const prompts = new Map(promptRows.map((t) => [t.seqId, t.tokens]))
    const seqIds = cache.seqIds.slice()
    const fed = seqIds.map((id, r) => prompts.get(id) ?? [cache.nextTokens[r]!, ...(byId.get(id) ?? [])])
    const width = fed.reduce((m, t) => Math.max(m, t.length), 0)
    // A prompt row reads the logits of its last token only; a decoding row, from its first.
    const outputs = await this.session.run(cache.feedsRagged(fed, seqIds.map((id, r) => (prompts.has(id) ? fed[r]!.length - 1 : 0))))
    const rows = await Promise.all(
      seqIds.map(async (id, r) => {
        const tokens: number[] = []
        const logprobs: Array<TokenLogprob | null> = []
        // A takeover's or a restore's fed tokens are its prompt's: all are kept, its first token sampled after the last.
        const prompt = prompts.has(id)
        for (let i = prompt ? fed[r]!.length - 1 : 0; i < fed[r]!.length; i++) {
          const { token, logprob } = await this.choose(id, this.logitsAt(outputs, r, i, width))
          tokens.push(token)
          logprobs.push(logprob ?? null)
          if (token !== fed[r]![i + 1]) break
        }
        return { tokens, logprobs, kept: prompt ? fed[r]!.length : tokens.length }
      }),
    )
    cache.acceptRagged(outputs, rows.map((row) => row.kept))
    rows.forEach((row, r) => (cache.nextTokens[r] = row.tokens.at(-1)!))
    const decoded: StepResult['decoded'] = { seqIds, tokens: rows.map((row) => row.tokens[0]!), more: rows.map((row) => row.tokens.slice(1)) }
    if (this.logprobRows.size > 0) {
      decoded.logprobs = rows.map((row) => row.logprobs[0]!)
      decoded.moreLogprobs = rows.map((row) => row.logprobs.slice(1))
    }
    return decoded
  }

  /** A row's token, and its log-probability entry when the row asked for one (from the logits before anything changed them). */
  private async choose(seqId: number, logits: Float32Array): Promise<{ token: number; logprob?: TokenLogprob }> {
    const top = this.logprobRows.get(seqId)
    const raw = top === undefined ? undefined : logits.slice()
    const token = await this.pick(seqId, logits)
    if (raw === undefined) return { token }
    return { token, logprob: tokenLogprob(raw, Math.min(raw.length, this.vocabSize), token, top!, this.tokenPiece!) }
  }

  /** A joining sequence's first token; its log-probability entry, when asked, is kept for the step's result. */
  private async first(seqId: number, logits: Float32Array): Promise<number> {
    const { token, logprob } = await this.choose(seqId, logits)
    if (logprob) this.joinLogprobs.set(seqId, logprob)
    return token
  }

  /**
   * A row's next token: within its grammar when it has one (the forbidden tokens' logits set to
   * -Infinity, then sampled as any row), and the grammar advanced by it.
   */
  private async pick(seqId: number, logits: Float32Array): Promise<number> {
    const constraint = this.constraints.get(seqId)
    if (!constraint) return this.samplerOf(seqId).sample(logits)
    await constraint.mask(logits)
    const token = this.samplerOf(seqId).sample(logits)
    if (!constraint.accept(token)) throw new Error(`sequence ${seqId}: its grammar refused the token it allowed (${token})`)
    return token
  }

  /** One part of one prompt, continuing its own B=1 cache (chunked prefill is exact). */
  private async prefillOne(p: PrefillPart): Promise<KvJoin[]> {
    if (p.start) await this.begin(p)
    const state = this.prefilling.get(p.seqId)
    if (!state) throw new Error(`prefill chunk for unknown sequence ${p.seqId}`)
    const s = p.tokens.length
    const outputs = await this.session.run(state.feeds(BigInt64Array.from(p.tokens, (t) => BigInt(t)), s))
    state.accept(outputs, s)
    if (!p.last) return []
    this.prefilling.delete(p.seqId)
    const logits = this.lastLogits(outputs, 0)
    const raw = p.forks?.length ? logits.slice() : undefined
    return this.withForks(p, state.join(p.seqId, await this.first(p.seqId, logits)), raw)
  }

  /**
   * A prompt's join, and its forks' (other choices of the same prompt): each gets its own
   * sampler and grammar, samples its first token from a copy of the prompt's last logits as the
   * model wrote them (`raw`, taken before the first sampling changed them in place), and copies
   * the same KV into its row.
   */
  private async withForks(p: PrefillPart, join: KvJoin, raw: Float32Array | undefined): Promise<KvJoin[]> {
    const joins = [join]
    if (!raw) return joins
    for (const fork of p.forks ?? []) {
      await this.prepareSampling(fork.seqId, fork.start)
      joins.push({ ...join, seqId: fork.seqId, nextToken: await this.first(fork.seqId, raw.slice()) })
    }
    return joins
  }

  /**
   * Whole prompts that continue cached prefixes. On the slot path they run as one ragged batch
   * (their pasts differ: each row starts from its own blocks; their new tokens differ in number),
   * not one run each: an editor's keystrokes are many such prompts at once. The concat path runs
   * them one at a time.
   */
  private async prefillEach(parts: PrefillPart[]): Promise<KvJoin[]> {
    for (const p of parts) if (!p.start || !p.last) throw new Error('prompts continuing cached prefixes share a chunk only whole')
    if (this.io.kvCache !== 'slots' || parts.length === 1) {
      const joins: KvJoin[] = []
      for (const p of parts) joins.push(...(await this.prefillOne(p)))
      return joins
    }
    for (const p of parts) await this.prepareSampling(p.seqId, p.start!)
    const blocks = parts.map((p) => this.startBlocks(p.seqId, p.start))
    const cache = this.bounded(new SlotKvCache(this.io, undefined, 1))
    const slots = parts.reduce((m, p, r) => Math.max(m, tokensIn(this.io, blocks[r]!) + p.tokens.length + 1), 0)
    cache.startRows(parts.map((p) => p.seqId), blocks, slots)
    const outputs = await this.session.run(cache.feedsRagged(parts.map((p) => p.tokens), parts.map((p) => p.tokens.length - 1)))
    const width = parts.reduce((m, p) => Math.max(m, p.tokens.length), 0)
    cache.acceptRagged(outputs, parts.map((p) => p.tokens.length))
    const joins: KvJoin[] = []
    for (const [r, p] of parts.entries()) {
      const logits = this.logitsAt(outputs, r, p.tokens.length - 1, width)
      const raw = p.forks?.length ? logits.slice() : undefined
      joins.push(...(await this.withForks(p, cache.joinRow(r, await this.first(p.seqId, logits)), raw)))
    }
    return joins
  }

  /**
   * Several whole short prompts as one left-padded batch (pads: mask 0, position 1), with an
   * empty past: the K/V outputs of both interfaces are then [k, kvHeads, width, headDim].
   */
  private async prefillMany(parts: PrefillPart[]): Promise<KvJoin[]> {
    for (const p of parts) if (!p.start || !p.last || continues(p)) throw new Error('a multi-prompt prefill chunk takes whole prompts only, none from the prefix cache')
    for (const p of parts) await this.begin(p)
    const k = parts.length
    const width = parts.reduce((m, p) => Math.max(m, p.tokens.length), 0)
    const ids = new BigInt64Array(k * width)
    const mask = new BigInt64Array(k * width)
    const positions = new BigInt64Array(k * width).fill(1n)
    parts.forEach((p, r) => {
      const pad = width - p.tokens.length
      p.tokens.forEach((t, i) => {
        ids[r * width + pad + i] = BigInt(t)
        mask[r * width + pad + i] = 1n
        positions[r * width + pad + i] = BigInt(i)
      })
    })
    const outputs = await this.session.run(modelFeeds(this.io, ids, [k, width], mask, width, positions, emptyLayers(this.io, k), 0))
    const layers = presentsOf(this.io, outputs)
    const joins: KvJoin[] = []
    for (const [r, p] of parts.entries()) {
      this.prefilling.delete(p.seqId)
      const logits = this.lastLogits(outputs, r)
      const raw = p.forks?.length ? logits.slice() : undefined
      const join = { seqId: p.seqId, nextToken: await this.first(p.seqId, logits), len: p.tokens.length, layers, row: r }
      joins.push(...(await this.withForks(p, join, raw)))
    }
    return joins
  }

  private savedBlock(slot: number): KvBlock {
    const block = this.blocks.get(slot)
    if (!block) throw new Error(`prefix-cache slot ${slot} was never saved`)
    return block
  }

  /** Drops a sequence's sampling state (it left, or its row went to another). */
  private forget(id: number): void {
    this.prefilling.delete(id)
    this.samplers.delete(id)
    this.constraints.get(id)?.dispose()
    this.constraints.delete(id)
    this.logprobRows.delete(id)
  }

  /** Copies `donor`'s first tokens for `seqId` to start from (startBlocks). */
  private donate(seqId: number, donor: DonorRow): void {
    this.donated.set(seqId, this.batch.readRow(donor.seqId, donor.tokens))
  }

  /** What a sequence starts from: its donor row's copy, or its prefix-cache blocks. */
  private startBlocks(seqId: number, start?: { donor?: DonorRow; prefix?: number[] }): KvBlock[] {
    const donated = this.donated.get(seqId)
    this.donated.delete(seqId)
    if (start?.donor && !donated) throw new Error(`sequence ${seqId}'s donor row was not copied`)
    return donated ? [donated] : (start?.prefix ?? []).map((slot) => this.savedBlock(slot))
  }

  /** Creates the sampler (and grammar state) and the empty B=1 cache of a sequence's first prefill part. */
  private async begin(p: PrefillPart): Promise<void> {
    const start = p.start!
    await this.prepareSampling(p.seqId, start)
    const cache = this.bounded(this.io.kvCache === 'slots' ? SlotKvCache.forSequence(this.io, p.seqId) : new ConcatPrefill(this.io))
    // The whole prompt's room, and the first generated token's, before its first chunk (within the budget: bounded()).
    if (cache instanceof SlotKvCache) cache.expect(start.tokens.length + 1)
    if (continues(p)) cache.startFrom(this.startBlocks(p.seqId, p.start))
    this.prefilling.set(p.seqId, cache)
  }

  /** A sequence's sampler, and its grammar state and log-probability reporting when it asks for them. */
  private async prepareSampling(seqId: number, start: NonNullable<PrefillPart['start']>): Promise<void> {
    if (start.constraint) await this.constrain(seqId, start)
    if (start.logprobs !== undefined) {
      if (!this.tokenPiece) throw new Error('log probabilities are not available: the model runner has no vocabulary')
      this.logprobRows.set(seqId, start.logprobs)
    }
    // A constrained sequence ends where its grammar does: its EOS is never banned.
    const banned = start.banEos && !start.constraint ? this.eosTokenIds : []
    this.samplers.set(seqId, new SequenceSampler(start.sampling, start.tokens, start.promptLen, banned))
  }

  /** The sequence's grammar state, with the tokens it already generated (a recompute or a continuation) replayed into it. */
  private async constrain(seqId: number, start: NonNullable<PrefillPart['start']>): Promise<void> {
    if (!this.grammars) throw new Error('structured output is not available: the model runner has no grammars')
    const constraint = await this.grammars.constraint(start.constraint!)
    for (let i = start.promptLen; i < start.tokens.length; i++) {
      if (!constraint.accept(start.tokens[i]!)) {
        constraint.dispose()
        throw new Error(`sequence ${seqId}: a replayed token does not match its grammar`)
      }
    }
    this.constraints.set(seqId, constraint)
  }

  /**
   * A slot cache's room is the budget less what the other slot caches hold (the concat caches
   * are ONNX Runtime's outputs, exactly the live tokens).
   */
  private bounded<C extends BatchCache | PrefillCache>(cache: C): C {
    if (cache instanceof SlotKvCache) {
      cache.buffers = this.buffers
      cache.room = () => {
        let others = 0
        for (const c of [this.batch, ...this.prefilling.values()]) if (c !== cache && c instanceof SlotKvCache) others += c.heldBytes
        return this.kvBudgetBytes - others
      }
    }
    return cache
  }

  /**
   * Row `row`'s logits at its last position (with left padding, the last column for every row),
   * indexed by the tensor's own shape: an export whose logits are wider than config.json's
   * vocab_size (a padded vocabulary) must not shift the rows after the first. float16 logits are
   * widened exactly (tensor-dtype.ts), so they are sampled as the same values in float32.
   */
  private lastLogits(outputs: ort.InferenceSession.ReturnType, row: number): Float32Array {
    const t = outputs.logits as ort.Tensor
    return this.logitsAt(outputs, row, t.dims[1]! - 1)
  }

  /**
   * Row `row`'s logits at `position` of the run's `fed` positions, of which it kept the last
   * (num_logits_to_keep; all of them by default).
   */
  private logitsAt(outputs: ort.InferenceSession.ReturnType, row: number, position: number, fed?: number): Float32Array {
    const t = outputs.logits as ort.Tensor
    const [, positions, v] = t.dims as [number, number, number]
    const kept = position - ((fed ?? positions) - positions)
    if (kept < 0) throw new Error(`logits at position ${position} of ${fed} were not kept (${positions} were)`)
    return floatsOf(t, (row * positions + kept) * v, v)
  }

  private samplerOf(seqId: number): SequenceSampler {
    const s = this.samplers.get(seqId)
    if (!s) throw new Error(`no sampler for sequence ${seqId}`)
    return s
  }
}

/** A first part that starts from KV already computed (prefix-cache blocks or a donor row), not from nothing. */
const continues = (p: PrefillPart): boolean => Boolean(p.start?.prefix?.length || p.start?.donor)
