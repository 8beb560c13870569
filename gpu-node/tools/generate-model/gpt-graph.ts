/**
 * GPT-2 style decoder: learned absolute positions (wpe), pre-LayerNorm blocks, multi-head
 * attention with biases, GELU MLP of 4x width, final LayerNorm, untied LM head.
 */

import { buildAttentionMask, splitHeads } from './attention-graph.ts'
import { attendLayer } from './cache-attention-graph.ts'
import { declareDecoderInputs, declareDecoderOutputs, LOGITS, logitPositions } from './decoder-io.ts'
import { GraphBuilder } from './graph-builder.ts'
import { BIAS_STD, EMBED_STD, LOGIT_STD, MLP_WRITE_GAIN, POSITION_STD, QK_GAIN, readStd, scaleColumns, writeStd } from './init-scales.ts'
import { gelu, layerNorm, linear, lmHead } from './layers.ts'
import type { OnnxGraph } from './onnx-writer.ts'
import type { GptPreset } from './presets.ts'

const LN_EPS = 1e-5

export function buildGptGraph(p: GptPreset, seed: number, vocabBias: Float32Array): OnnxGraph {
  const g = new GraphBuilder('zerolayer-gpt2', seed)
  const io = declareDecoderInputs(g, p)
  const d = p.hidden
  const headDim = d / p.heads

  const tokens = g.op('Gather', [g.normal('wte', [p.vocabSize, d], EMBED_STD), io.inputIds])
  const positions = g.op('Gather', [g.normal('wpe', [p.maxPositions, d], POSITION_STD), io.positionIds])
  let h = g.op('Add', [tokens, positions]) // [B,S,d]
  const mask = buildAttentionMask(g, io.inputIds, io.attentionMask)

  for (let i = 0; i < p.layers; i++) {
    const pre = `h.${i}`
    const x = layerNorm(g, h, `${pre}.ln_1`, d, LN_EPS)
    // Fused c_attn as in GPT-2: one [d, 3d] GEMM, then split into q, k, v.
    const qkv = g.op('Add', [g.op('MatMul', [x, cAttnWeight(g, `${pre}.attn.c_attn.weight`, d)]), g.normal(`${pre}.attn.c_attn.bias`, [3 * d], BIAS_STD)])
    const [q, k, v] = g.opMulti('Split', [qkv, g.ints([d, d, d])], 3, { axis: { int: 2 } })
    const context = attendLayer(g, p, i, {
      query: splitHeads(g, q, p.heads, headDim),
      key: splitHeads(g, k, p.heads, headDim),
      value: splitHeads(g, v, p.heads, headDim),
      pastKey: io.pastKeys[i],
      pastValue: io.pastValues[i],
      mask,
      heads: p.heads,
      kvHeads: p.heads,
      headDim,
    })
    h = g.op('Add', [h, linear(g, context, `${pre}.attn.c_proj`, d, d, { std: writeStd(d), biasStd: BIAS_STD })])

    const y = layerNorm(g, h, `${pre}.ln_2`, d, LN_EPS)
    const inner = gelu(g, linear(g, y, `${pre}.mlp.c_fc`, d, 4 * d, { std: readStd(d), biasStd: BIAS_STD }))
    h = g.op('Add', [h, linear(g, inner, `${pre}.mlp.c_proj`, 4 * d, d, { std: MLP_WRITE_GAIN * writeStd(4 * d), biasStd: BIAS_STD })])
  }

  lmHead(g, logitPositions(g, io, layerNorm(g, h, 'ln_f', d, LN_EPS)), d, vocabBias, LOGIT_STD, LOGITS)
  declareDecoderOutputs(g, p)
  return g.build()
}

/** c_attn [d, 3d]: query and key columns carry QK_GAIN, value columns stay at unit gain. */
function cAttnWeight(g: GraphBuilder, name: string, d: number): string {
  const w = g.normalData(name, [d, 3 * d], readStd(d))
  scaleColumns(w, 3 * d, 0, 2 * d, QK_GAIN)
  return g.weight(name, [d, 3 * d], w)
}
