import type { ModelInfo, ModelRunner, StepPlan, StepResult } from '../../src/model/runner.ts'

/**
 * A ModelRunner test double for scheduler and engine tests (the other side of the model
 * boundary): it keeps batch rows exactly as the ONNX runner does (release → decode → prefill →
 * join) and "samples" token = next(seqId, tokens so far), so output depends only on the
 * sequence (its prompt and length), never on batch composition or preemption — as real greedy
 * decoding should. Each step yields to the event loop once, as a worker round trip does.
 */
export class ScriptedRunner implements ModelRunner {
  readonly info: ModelInfo
  /** Batch rows in order, with the sequence length each row has reached. */
  rows: { seqId: number; key: number; len: number }[] = []
  private readonly prefillLen = new Map<number, number>()
  /** Per sequence: a hash of its prompt, so tokens do not depend on the engine's seq ids. */
  private readonly keys = new Map<number, number>()
  /** Every plan seen, for assertions. */
  readonly plans: StepPlan[] = []
  /** When set, step() waits on it (lets tests hold a step "in flight"). */
  gate: Promise<void> | null = null

  constructor(
    info: Partial<ModelInfo> = {},
    readonly next: (key: number, len: number) => number = (key, len) => 1 + ((key * 31 + len * 7) % 25),
    /** Tokens per prefix-cache block: a start with `prefix` continues after that many per slot. */
    private readonly prefixBlockTokens = 16,
  ) {
    this.info = { vocabSize: 32, numLayers: 1, numKvHeads: 1, headDim: 1, kvType: 'float32', contextLength: 4096, kvBytesPerToken: 8, eosTokenIds: [0], batching: 'continuous', ...info }
  }

  async step(plan: StepPlan): Promise<StepResult> {
    this.plans.push(structuredClone(plan))
    await new Promise((resolve) => setImmediate(resolve))
    if (this.gate) await this.gate
    // A takeover renames its row and cuts it; the decode step then feeds the rest of its prompt.
    const fed = new Map<number, number>()
    for (const t of plan.takeover ?? []) {
      const row = this.rows.find((r) => r.seqId === t.from)
      if (!row) throw new Error(`takeover of a row that is not in the batch: ${t.from}`)
      Object.assign(row, { seqId: t.seqId, key: promptKey(t.start), len: t.keep })
      fed.set(t.seqId, t.tokens.length)
    }
    const released = new Set(plan.release)
    for (const id of released) {
      this.prefillLen.delete(id)
      this.keys.delete(id)
    }
    this.rows = this.rows.filter((r) => !released.has(r.seqId))
    // A restore adds a row holding its cached prefix; the decode step feeds it the rest as well.
    for (const r of plan.restore ?? []) {
      this.rows.push({ seqId: r.seqId, key: promptKey(r.start), len: r.donor?.tokens ?? (r.prefix?.length ?? 0) * this.prefixBlockTokens })
      fed.set(r.seqId, r.tokens.length)
    }
    const decoded = { seqIds: [] as number[], tokens: [] as number[] }
    if (plan.decode) {
      for (const row of this.rows) {
        row.len += fed.get(row.seqId) ?? 1
        decoded.seqIds.push(row.seqId)
        decoded.tokens.push(this.next(row.key, row.len))
      }
    }
    const joined = { seqIds: [] as number[], tokens: [] as number[] }
    for (const { seqId, tokens, last, start } of plan.prefill) {
      if (start) this.keys.set(seqId, promptKey(start))
      const key = this.keys.get(seqId) ?? 0
      const len = (start ? (start.donor?.tokens ?? (start.prefix?.length ?? 0) * this.prefixBlockTokens) : (this.prefillLen.get(seqId) ?? 0)) + tokens.length
      this.prefillLen.set(seqId, len)
      if (last) {
        this.prefillLen.delete(seqId)
        joined.seqIds.push(seqId)
        joined.tokens.push(this.next(key, len))
        this.rows.push({ seqId, key, len })
      }
    }
    const width = this.rows.reduce((m, r) => Math.max(m, r.len), 0)
    return { decoded, joined, kvRows: this.rows.length, kvTokens: width, decodeMs: 0, prefillMs: 0 }
  }

  async close(): Promise<void> {}
}

const promptKey = (start: { tokens: number[]; promptLen: number }) => start.tokens.slice(0, start.promptLen).reduce((h, t) => (h * 131 + t) % 1_000_003, 7)

/** A decoder for ScriptedRunner tokens: id n → the letter n (1 = "a"). */
export const letterDecoder = { decode: (ids: readonly number[]) => ids.map((t) => String.fromCharCode(96 + t)).join('') }
