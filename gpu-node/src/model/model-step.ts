import { performance } from 'node:perf_hooks'
import * as ort from 'onnxruntime-node'
import { SequenceSampler } from '../engine/sampler.ts'
import { BatchKvCache, emptyLayers, modelFeeds, presentsOf, type LayerKv } from './batch-kv-cache.ts'
import type { SessionIo } from './session-io.ts'
import type { StepPlan, StepResult } from './runner.ts'

/** A sequence between its first and last prefill chunk: its own B=1 cache. */
interface Prefilling {
  layers: LayerKv[]
  len: number
}

/**
 * Executes StepPlans against an ONNX Runtime session: the batch cache, the prefill caches and
 * the per-sequence samplers all live here, beside the logits, so only token ids cross threads.
 */
export class ModelStep {
  private readonly batch: BatchKvCache
  private readonly prefilling = new Map<number, Prefilling>()
  private readonly samplers = new Map<number, SequenceSampler>()

  constructor(
    private readonly session: ort.InferenceSession,
    private readonly io: SessionIo,
    private readonly vocabSize: number,
    private readonly eosTokenIds: number[],
    /** Injectable so a test can prove that wrong positions would be caught. */
    batch?: BatchKvCache,
  ) {
    this.batch = batch ?? new BatchKvCache(io)
  }

  async run(plan: StepPlan): Promise<StepResult> {
    const released = new Set(plan.release)
    for (const id of released) {
      this.prefilling.delete(id)
      this.samplers.delete(id)
    }
    this.batch.relayout(released)
    const result: StepResult = { decoded: { seqIds: [], tokens: [] }, kvRows: 0, kvTokens: 0, decodeMs: 0, prefillMs: 0 }
    if (plan.decode && this.batch.rows > 0) {
      const t0 = performance.now()
      result.decoded = await this.decode()
      result.decodeMs = performance.now() - t0
    }
    if (plan.prefill) {
      const t0 = performance.now()
      result.firstToken = await this.prefill(plan.prefill)
      result.prefillMs = performance.now() - t0
    }
    result.kvRows = this.batch.rows
    result.kvTokens = this.batch.width
    return result
  }

  private async decode(): Promise<StepResult['decoded']> {
    const outputs = await this.session.run(this.batch.decodeFeeds())
    this.batch.acceptDecode(outputs)
    const logits = (outputs.logits as ort.Tensor).data as Float32Array
    const seqIds = this.batch.seqIds.slice()
    const tokens = seqIds.map((id, r) => {
      const token = this.samplerOf(id).sample(logits.subarray(r * this.vocabSize, (r + 1) * this.vocabSize))
      this.batch.nextTokens[r] = token
      return token
    })
    return { seqIds, tokens }
  }

  private async prefill(p: NonNullable<StepPlan['prefill']>): Promise<number | undefined> {
    if (p.start) {
      const banned = p.start.banEos ? this.eosTokenIds : []
      this.samplers.set(p.seqId, new SequenceSampler(p.start.sampling, p.start.tokens, p.start.promptLen, banned))
      this.prefilling.set(p.seqId, { layers: emptyLayers(this.io, 1), len: 0 })
    }
    const state = this.prefilling.get(p.seqId)
    if (!state) throw new Error(`prefill chunk for unknown sequence ${p.seqId}`)
    const s = p.tokens.length
    const ids = BigInt64Array.from(p.tokens, (t) => BigInt(t))
    const mask = new BigInt64Array(state.len + s).fill(1n)
    const positions = BigInt64Array.from({ length: s }, (_, i) => BigInt(state.len + i))
    const outputs = await this.session.run(modelFeeds(this.io, ids, [1, s], mask, state.len + s, positions, state.layers, state.len))
    state.layers = presentsOf(this.io, outputs)
    state.len += s
    if (!p.last) return undefined
    this.prefilling.delete(p.seqId)
    const logitsTensor = outputs.logits as ort.Tensor
    const rowsOut = logitsTensor.dims[1]
    const logits = (logitsTensor.data as Float32Array).subarray((rowsOut - 1) * this.vocabSize, rowsOut * this.vocabSize)
    const token = this.samplerOf(p.seqId).sample(logits)
    this.batch.relayout(new Set(), { seqId: p.seqId, nextToken: token, len: state.len, layers: state.layers })
    return token
  }

  private samplerOf(seqId: number): SequenceSampler {
    const s = this.samplers.get(seqId)
    if (!s) throw new Error(`no sampler for sequence ${seqId}`)
    return s
  }
}
