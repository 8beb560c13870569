/**
 * Llama style decoder: RoPE (rotate-half convention, cos/sin rows gathered by position_ids),
 * pre-RMSNorm blocks, grouped KV heads (past/present carry H_kv heads), SwiGLU MLP, no biases
 * in the blocks, final RMSNorm, untied LM head. Qwen2 is the same with biases on the q/k/v
 * projections, added before RoPE as in HF.
 */

import { buildAttentionMask, splitHeads } from './attention-graph.ts'
import { attendLayer } from './cache-attention-graph.ts'
import { declareDecoderInputs, declareDecoderOutputs, LOGITS, logitPositions } from './decoder-io.ts'
import { GraphBuilder } from './graph-builder.ts'
import { EMBED_STD, LOGIT_STD, MLP_WRITE_GAIN, QK_GAIN, QKV_BIAS_STD, readStd, scaleColumns, writeStd } from './init-scales.ts'
import { linear, lmHead, rmsNorm, silu } from './layers.ts'
import type { OnnxGraph } from './onnx-writer.ts'
import type { LlamaPreset } from './presets.ts'

export function buildLlamaGraph(p: LlamaPreset, seed: number, vocabBias: Float32Array): OnnxGraph {
  const g = new GraphBuilder(`zerolayer-${p.family}`, seed)
  const io = declareDecoderInputs(g, p)
  const d = p.hidden
  const headDim = d / p.heads
  const qWidth = p.heads * headDim
  const kvWidth = p.kvHeads * headDim

  let h = g.op('Gather', [g.normal('model.embed_tokens.weight', [p.vocabSize, d], EMBED_STD), io.inputIds])
  const mask = buildAttentionMask(g, io.inputIds, io.attentionMask)
  const rope = ropeTables(g, p, io.positionIds, headDim)

  for (let i = 0; i < p.layers; i++) {
    const pre = `model.layers.${i}`
    const x = rmsNorm(g, h, `${pre}.input_layernorm`, d, p.rmsNormEps)
    // q, k and v projections fused into one GEMM, then split.
    const qkvName = `${pre}.self_attn.qkv_proj`
    const qkvWidth = qWidth + 2 * kvWidth
    const qkvWeight = g.normalData(`${qkvName}.weight`, [d, qkvWidth], readStd(d))
    scaleColumns(qkvWeight, qkvWidth, 0, qWidth + kvWidth, QK_GAIN)
    let qkv = g.op('MatMul', [x, g.weight(`${qkvName}.weight`, [d, qkvWidth], qkvWeight)])
    if (p.family === 'qwen2') qkv = g.op('Add', [qkv, g.normal(`${qkvName}.bias`, [qkvWidth], QKV_BIAS_STD)])
    const [q, k, v] = g.opMulti('Split', [qkv, g.ints([qWidth, kvWidth, kvWidth])], 3, { axis: { int: 2 } })
    const context = attendLayer(g, p, i, {
      query: applyRope(g, splitHeads(g, q, p.heads, headDim), rope, headDim),
      // Keys are cached after RoPE, as in HF: past keys never need re-rotation.
      key: applyRope(g, splitHeads(g, k, p.kvHeads, headDim), rope, headDim),
      value: splitHeads(g, v, p.kvHeads, headDim),
      pastKey: io.pastKeys[i],
      pastValue: io.pastValues[i],
      mask,
      heads: p.heads,
      kvHeads: p.kvHeads,
      headDim,
    })
    h = g.op('Add', [h, linear(g, context, `${pre}.self_attn.o_proj`, qWidth, d, { std: writeStd(qWidth) })])

    const y = rmsNorm(g, h, `${pre}.post_attention_layernorm`, d, p.rmsNormEps)
    // gate and up projections fused into one [d, 2I] GEMM.
    const gateUp = linear(g, y, `${pre}.mlp.gate_up_proj`, d, 2 * p.intermediate, { std: readStd(d) })
    const [gate, up] = g.opMulti('Split', [gateUp, g.ints([p.intermediate, p.intermediate])], 2, { axis: { int: 2 } })
    const inner = g.op('Mul', [silu(g, gate), up])
    h = g.op('Add', [h, linear(g, inner, `${pre}.mlp.down_proj`, p.intermediate, d, { std: MLP_WRITE_GAIN * writeStd(p.intermediate) })])
  }

  lmHead(g, logitPositions(g, io, rmsNorm(g, h, 'model.norm', d, p.rmsNormEps)), d, vocabBias, LOGIT_STD, LOGITS)
  declareDecoderOutputs(g, p)
  return g.build()
}

interface RopeRows {
  /** [B,1,S,D], broadcast over heads. */
  cos: string
  sin: string
}

/**
 * cos/sin tables [maxPositions, D] with HF's layout (frequencies repeated: cat(freqs, freqs)),
 * gathered once per step by position_ids and shared by every layer.
 */
function ropeTables(g: GraphBuilder, p: LlamaPreset, positionIds: string, headDim: number): RopeRows {
  const half = headDim / 2
  const cos = new Float32Array(p.maxPositions * headDim)
  const sin = new Float32Array(p.maxPositions * headDim)
  for (let pos = 0; pos < p.maxPositions; pos++) {
    for (let i = 0; i < half; i++) {
      const angle = pos / Math.pow(p.ropeTheta, (2 * i) / headDim)
      const c = Math.cos(angle)
      const s = Math.sin(angle)
      cos[pos * headDim + i] = cos[pos * headDim + half + i] = c
      sin[pos * headDim + i] = sin[pos * headDim + half + i] = s
    }
  }
  const rows = (table: string): string => g.op('Unsqueeze', [g.op('Gather', [table, positionIds]), g.ints([1])])
  return { cos: rows(g.weight('rope.cos', [p.maxPositions, headDim], cos)), sin: rows(g.weight('rope.sin', [p.maxPositions, headDim], sin)) }
}

/** x·cos + rotate_half(x)·sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]). */
function applyRope(g: GraphBuilder, x: string, rope: RopeRows, headDim: number): string {
  const half = headDim / 2
  const axis = g.ints([3])
  const first = g.op('Slice', [x, g.ints([0]), g.ints([half]), axis])
  const second = g.op('Slice', [x, g.ints([half]), g.ints([headDim]), axis])
  const rotated = g.op('Concat', [g.op('Neg', [second]), first], { axis: { int: 3 } })
  return g.op('Add', [g.op('Mul', [x, rope.cos]), g.op('Mul', [rotated, rope.sin])])
}
