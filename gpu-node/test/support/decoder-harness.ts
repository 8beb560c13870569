/**
 * Test-only helpers: runs a generated model directory through onnxruntime-node with explicit
 * attention_mask / position_ids / past, the way a batching runner would.
 */

import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { ONE_THREAD } from './one-thread.ts'

export interface DecoderShape {
  layers: number
  kvHeads: number
  headDim: number
  vocabSize: number
}

/** present.* of one step, keyed by the past_key_values.* name it feeds next. */
export type KvCache = Record<string, ort.Tensor>

export interface StepInput {
  ids: number[][]
  /** [B, P+S]: 1 = real token, 0 = pad. */
  mask: number[][]
  positions: number[][]
  /** Omitted: first step (P = 0). */
  past?: KvCache
}

export interface StepOutput {
  /** [B, S, V] row-major. */
  logits: Float32Array
  present: KvCache
}

export function readDecoderShape(dir: string): DecoderShape {
  const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, number>
  return c.n_layer !== undefined
    ? { layers: c.n_layer, kvHeads: c.n_head, headDim: c.n_embd / c.n_head, vocabSize: c.vocab_size }
    : { layers: c.num_hidden_layers, kvHeads: c.num_key_value_heads, headDim: c.head_dim ?? c.hidden_size / c.num_attention_heads, vocabSize: c.vocab_size }
}

export class DecoderHarness {
  private constructor(
    readonly session: ort.InferenceSession,
    readonly shape: DecoderShape,
  ) {}

  static async open(dir: string): Promise<DecoderHarness> {
    const session = await ort.InferenceSession.create(join(dir, 'model.onnx'), ONE_THREAD)
    return new DecoderHarness(session, readDecoderShape(dir))
  }

  async step(input: StepInput): Promise<StepOutput> {
    const batch = input.ids.length
    const feeds: Record<string, ort.Tensor> = {
      input_ids: int64(input.ids),
      attention_mask: int64(input.mask),
      position_ids: int64(input.positions),
    }
    for (let i = 0; i < this.shape.layers; i++) {
      for (const part of ['key', 'value']) {
        const name = `past_key_values.${i}.${part}`
        feeds[name] = input.past?.[name] ?? new ort.Tensor('float32', new Float32Array(0), [batch, this.shape.kvHeads, 0, this.shape.headDim])
      }
    }
    const out = await this.session.run(feeds)
    const present: KvCache = {}
    for (let i = 0; i < this.shape.layers; i++) {
      for (const part of ['key', 'value']) present[`past_key_values.${i}.${part}`] = out[`present.${i}.${part}`] as ort.Tensor
    }
    return { logits: out.logits.data as Float32Array, present }
  }

  /** Logits of row `row`, position `pos` from a [B,S,V] output. */
  logitsAt(out: StepOutput, row: number, pos: number, seqLen: number): Float32Array {
    const v = this.shape.vocabSize
    const start = (row * seqLen + pos) * v
    return out.logits.subarray(start, start + v)
  }

  async close(): Promise<void> {
    await this.session.release()
  }
}

function int64(rows: number[][]): ort.Tensor {
  const flat = BigInt64Array.from(rows.flat(), (x) => BigInt(x))
  return new ort.Tensor('int64', flat, [rows.length, rows[0].length])
}

export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]))
  return m
}

export function argmax(a: Float32Array): number {
  let best = 0
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i
  return best
}

export function std(a: Float32Array): number {
  let mean = 0
  for (const x of a) mean += x
  mean /= a.length
  let v = 0
  for (const x of a) v += (x - mean) ** 2
  return Math.sqrt(v / a.length)
}
