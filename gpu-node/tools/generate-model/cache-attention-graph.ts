/**
 * Attention for the "slot cache" graph variant (presets with `kvCache: 'slots'`): the past K/V
 * are the runner's own fixed-capacity buffers [B,H_kv,C,D] (C = capacity, masked by
 * attention_mask's first C columns), attended without a Concat, and only the step's new K/V
 * [B,H_kv,S,D] are outputs. The concat variant copies the whole cache into `present.*` inside ONNX
 * Runtime and onnxruntime-node copies every output again into a fresh JS buffer (FACTS.md), a
 * cost that grows with B·T; here the runner writes the new columns into its buffers itself.
 *
 * attention_mask is [B, C+S]; the masking rule is attention-graph.ts's with past = C: the query
 * at C+i may attend slot j < C iff mask[b,j] = 1, and new token j iff j <= i and mask[b,C+j] = 1.
 */

import { attend, type AttentionArgs } from './attention-graph.ts'
import { newKeyName, newValueName, presentKeyName, presentValueName } from './decoder-io.ts'
import type { GraphBuilder } from './graph-builder.ts'
import { usesSlotCache, type ModelPreset } from './presets.ts'

export interface SlotAttentionArgs extends Omit<AttentionArgs, 'presentKeyName' | 'presentValueName'> {
  /** Output names for this step's new K/V (graph outputs). */
  newKeyName: string
  newValueName: string
}

export function attendSlots(g: GraphBuilder, a: SlotAttentionArgs): string {
  g.op('Identity', [a.key], undefined, a.newKeyName)
  g.op('Identity', [a.value], undefined, a.newValueName)
  const group = a.heads / a.kvHeads
  const scaled = g.op('Mul', [a.query, g.floatScalar(1 / Math.sqrt(a.headDim))])
  const folded = group === 1 ? scaled : g.op('Reshape', [scaled, g.ints([0, a.kvHeads, -1, a.headDim])])
  // Scores as K·Qᵀ (the cache is the streamed GEMM operand, read in place; see attention-graph.ts),
  // for the cache and the new keys separately, joined on the small scores tensor only.
  const queryT = g.op('Transpose', [folded], { perm: { ints: [0, 1, 3, 2] } }) // [B,Hkv,D,G*S]
  const pastScoresT = g.op('MatMul', [a.pastKey, queryT]) // [B,Hkv,C,G*S]
  const newScoresT = g.op('MatMul', [a.key, queryT]) // [B,Hkv,S,G*S]
  const scoresT = g.op('Concat', [pastScoresT, newScoresT], { axis: { int: 2 } }) // [B,Hkv,C+S,G*S]
  let scores = g.op('Transpose', [scoresT], { perm: { ints: [0, 1, 3, 2] } }) // [B,Hkv,G*S,C+S]
  if (group !== 1) scores = g.op('Reshape', [scores, g.ints([0, a.heads, -1, 0])]) // [B,H,S,C+S]
  const probs = g.op('Softmax', [g.op('Add', [scores, a.mask])], { axis: { int: -1 } })
  const probsFolded = group === 1 ? probs : g.op('Reshape', [probs, g.ints([0, a.kvHeads, -1, 0])])
  const capacity = g.op('Shape', [a.pastKey], { start: { int: 2 }, end: { int: 3 } }) // [C]
  const axis = g.ints([3])
  const pastProbs = g.op('Slice', [probsFolded, g.ints([0]), capacity, axis])
  const newProbs = g.op('Slice', [probsFolded, capacity, g.ints([Number.MAX_SAFE_INTEGER]), axis])
  let context = g.op('Add', [g.op('MatMul', [pastProbs, a.pastValue]), g.op('MatMul', [newProbs, a.value])]) // [B,Hkv,G*S,D]
  if (group !== 1) context = g.op('Reshape', [context, g.ints([0, a.heads, -1, a.headDim])]) // [B,H,S,D]
  const merged = g.op('Transpose', [context], { perm: { ints: [0, 2, 1, 3] } }) // [B,S,H,D]
  return g.op('Reshape', [merged, g.ints([0, 0, a.heads * a.headDim])])
}

/** Layer `layer`'s attention in the preset's KV interface (concat or slots). */
export function attendLayer(g: GraphBuilder, p: ModelPreset, layer: number, a: Omit<AttentionArgs, 'presentKeyName' | 'presentValueName'>): string {
  if (usesSlotCache(p)) return attendSlots(g, { ...a, newKeyName: newKeyName(layer), newValueName: newValueName(layer) })
  return attend(g, { ...a, presentKeyName: presentKeyName(layer), presentValueName: presentValueName(layer) })
}
