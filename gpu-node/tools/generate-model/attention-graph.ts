/**
 * Causal self-attention over past + new keys, shared by both model families.
 *
 * Masking rule: the query at absolute index P+i may attend key j iff j <= P+i and
 * attention_mask[b,j] == 1. Disallowed scores get a finite -1e9 added (HF uses finfo.min for the
 * same reason): a pad query whose row is entirely masked then softmaxes to a uniform row of
 * finite values instead of NaN, and exp(-1e9 - max) is exactly 0 for real rows, which is what
 * makes padded batching exact.
 */

import type { GraphBuilder } from './graph-builder.ts'

/** Additive mask bias for disallowed (query, key) pairs. */
const MASKED_BIAS = -1e9

/** Builds the additive mask [B,1,S,T] (0 or -1e9) once; every layer adds it to its scores. */
export function buildAttentionMask(g: GraphBuilder, inputIds: string, attentionMask: string): string {
  const seqLen = g.op('Shape', [inputIds], { start: { int: 1 }, end: { int: 2 } }) // [S]
  const totalLen = g.op('Shape', [attentionMask], { start: { int: 1 }, end: { int: 2 } }) // [T]
  const pastLen = g.op('Sub', [totalLen, seqLen]) // [P]
  const scalar = (x: string): string => g.op('Squeeze', [x])
  const one = g.intScalar(1)
  const queryPos = g.op('Range', [scalar(pastLen), scalar(totalLen), one]) // [S]: P..T-1
  const keyPos = g.op('Range', [g.intScalar(0), scalar(totalLen), one]) // [T]: 0..T-1
  const causal = g.op('LessOrEqual', [
    g.op('Unsqueeze', [keyPos, g.ints([0])]), // [1,T]
    g.op('Unsqueeze', [queryPos, g.ints([1])]), // [S,1]
  ]) // [S,T]
  const notPad = g.op('Unsqueeze', [g.op('Cast', [attentionMask], { to: { int: 9 } }), g.ints([1, 2])]) // [B,1,1,T]
  const allowed = g.op('And', [causal, notPad]) // [B,1,S,T]
  return g.op('Where', [allowed, g.floatScalar(0), g.floatScalar(MASKED_BIAS)])
}

/** [B,S,n*D] -> [B,n,S,D] */
export function splitHeads(g: GraphBuilder, x: string, heads: number, headDim: number): string {
  const r = g.op('Reshape', [x, g.ints([0, 0, heads, headDim])])
  return g.op('Transpose', [r], { perm: { ints: [0, 2, 1, 3] } })
}

export interface AttentionArgs {
  /** Queries [B,H,S,D], already position-encoded (RoPE) where the family uses it. */
  query: string
  /** New keys/values [B,H_kv,S,D] for this step's tokens. */
  key: string
  value: string
  pastKey: string
  pastValue: string
  /** Names the concatenated caches must carry (they are graph outputs). */
  presentKeyName: string
  presentValueName: string
  mask: string
  heads: number
  kvHeads: number
  headDim: number
}

/**
 * Scaled dot-product attention; returns the merged heads [B,S,H*D]. With grouped KV heads the
 * queries are folded to [B,H_kv,G*S,D] (query head h uses KV head h / G, as HF's repeat_kv), so
 * the cache is never copied per group.
 */
export function attend(g: GraphBuilder, a: AttentionArgs): string {
  const presentKey = g.op('Concat', [a.pastKey, a.key], { axis: { int: 2 } }, a.presentKeyName) // [B,Hkv,T,D]
  const presentValue = g.op('Concat', [a.pastValue, a.value], { axis: { int: 2 } }, a.presentValueName)
  const group = a.heads / a.kvHeads
  const scaled = g.op('Mul', [a.query, g.floatScalar(1 / Math.sqrt(a.headDim))])
  const folded = group === 1 ? scaled : g.op('Reshape', [scaled, g.ints([0, a.kvHeads, -1, a.headDim])])
  // Scores as K·Qᵀ, then transposed: the cache is the streamed GEMM operand, read in place. Q·Kᵀ
  // became FusedMatMul(transB, alpha = scale) in ONNX Runtime, whose GEMM packs (copies) Kᵀ since
  // alpha ≠ 1 rules out MLAS's M = 1 kernel (and with grouped heads M = G·S > 1 packs anyway).
  // Only the small Qᵀ and the [.., T, G·S] scores are transposed here.
  const queryT = g.op('Transpose', [folded], { perm: { ints: [0, 1, 3, 2] } }) // [B,Hkv,D,G*S]
  const scoresT = g.op('MatMul', [presentKey, queryT]) // [B,Hkv,T,G*S]
  let scores = g.op('Transpose', [scoresT], { perm: { ints: [0, 1, 3, 2] } }) // [B,Hkv,G*S,T]
  if (group !== 1) scores = g.op('Reshape', [scores, g.ints([0, a.heads, -1, 0])]) // [B,H,S,T]
  const probs = g.op('Softmax', [g.op('Add', [scores, a.mask])], { axis: { int: -1 } })
  const probsFolded = group === 1 ? probs : g.op('Reshape', [probs, g.ints([0, a.kvHeads, -1, 0])])
  let context = g.op('MatMul', [probsFolded, presentValue]) // [B,Hkv,G*S,D]
  if (group !== 1) context = g.op('Reshape', [context, g.ints([0, a.heads, -1, a.headDim])]) // [B,H,S,D]
  const merged = g.op('Transpose', [context], { perm: { ints: [0, 2, 1, 3] } }) // [B,S,H,D]
  return g.op('Reshape', [merged, g.ints([0, 0, a.heads * a.headDim])])
}
