/** Building blocks over [B,S,d] activations, each from standard ai.onnx opset-17 ops only. */

import type { GraphBuilder } from './graph-builder.ts'

export interface LinearInit {
  /** Weight entries are N(0, std²); the weight is stored [in, out] so MatMul needs no transpose. */
  std: number
  /** Bias entries are N(0, biasStd²); omitted means no bias (Llama). */
  biasStd?: number
}

export function linear(g: GraphBuilder, x: string, name: string, inDim: number, outDim: number, init: LinearInit): string {
  const y = g.op('MatMul', [x, g.normal(`${name}.weight`, [inDim, outDim], init.std)])
  if (init.biasStd === undefined) return y
  return g.op('Add', [y, g.normal(`${name}.bias`, [outDim], init.biasStd)])
}

/** GPT-2 LayerNorm (opset-17 LayerNormalization over the last axis). Scale near 1, shift near 0. */
export function layerNorm(g: GraphBuilder, x: string, name: string, dim: number, eps: number): string {
  const scale = g.normal(`${name}.weight`, [dim], 0.02, 1)
  const shift = g.normal(`${name}.bias`, [dim], 0.02)
  return g.op('LayerNormalization', [x, scale, shift], { axis: { int: -1 }, epsilon: { float: eps } })
}

/** Llama RMSNorm: x / sqrt(mean(x²) + eps) * w, from primitive ops (no contrib ops). */
export function rmsNorm(g: GraphBuilder, x: string, name: string, dim: number, eps: number): string {
  const meanSquare = g.op('ReduceMean', [g.op('Mul', [x, x])], { axes: { ints: [-1] }, keepdims: { int: 1 } })
  const rms = g.op('Sqrt', [g.op('Add', [meanSquare, g.floatScalar(eps)])])
  const normed = g.op('Div', [x, rms])
  return g.op('Mul', [normed, g.normal(`${name}.weight`, [dim], 0.02, 1)])
}

/** Exact (erf) GELU, HF's "gelu": 0.5·x·(1 + erf(x/√2)). Opset 17 has no Gelu op. */
export function gelu(g: GraphBuilder, x: string): string {
  const erf = g.op('Erf', [g.op('Mul', [x, g.floatScalar(Math.SQRT1_2)])])
  const half = g.op('Mul', [x, g.floatScalar(0.5)])
  return g.op('Mul', [half, g.op('Add', [erf, g.floatScalar(1)])])
}

/** SiLU: x·sigmoid(x). */
export function silu(g: GraphBuilder, x: string): string {
  return g.op('Mul', [x, g.op('Sigmoid', [x])])
}

/**
 * Output projection to the vocabulary plus a fixed per-token bias (see lm-head-bias.ts), named
 * `logits`. Untied from the embedding so no per-step transpose of a [V,d] table is needed.
 */
export function lmHead(g: GraphBuilder, x: string, hidden: number, vocabBias: Float32Array, logitStd: number, outputName: string): string {
  const y = g.op('MatMul', [x, g.normal('lm_head.weight', [hidden, vocabBias.length], logitStd / Math.sqrt(hidden))])
  return g.op('Add', [y, g.weight('lm_head.bias', [vocabBias.length], vocabBias)], undefined, outputName)
}
