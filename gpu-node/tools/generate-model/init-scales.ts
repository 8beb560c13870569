/**
 * Initial weight scales. The generated models are untrained, so these choose the numbers:
 * every norm output has unit variance, each sub-layer writes a moderate update into the residual
 * stream (so token identity, position and context all still move the logits), and the output
 * projection gives logits a standard deviation near LOGIT_STD over the vocabulary: wide enough
 * that greedy decoding almost never meets a near-tie, narrow enough that sampling stays varied.
 */

/** Target std of the random part of the logits across the vocabulary. */
export const LOGIT_STD = 3

/** Token embedding std: the residual stream starts at unit scale. */
export const EMBED_STD = 1

/** GPT-2 learned position embedding std: large enough that wrong position_ids change logits visibly. */
export const POSITION_STD = 0.5

/** Projections that read a unit-variance input: std 1/sqrt(fanIn) keeps outputs at unit variance. */
export const readStd = (fanIn: number): number => 1 / Math.sqrt(fanIn)

/** Projections that write into the residual stream: a fraction of unit scale per sub-layer. */
export const writeStd = (fanIn: number): number => 0.6 / Math.sqrt(fanIn)

/** GELU and SwiGLU outputs have variance ~0.4, not 1: the MLP's write-back is scaled up to match attention's. */
export const MLP_WRITE_GAIN = 1.5

/** Query/key gain: attention scores get std ~QK_GAIN², so attention is neither uniform nor one-hot. */
export const QK_GAIN = 1.4

/** Std of biases (GPT-2 style linears carry small, non-zero biases). */
export const BIAS_STD = 0.02

/**
 * Std of Qwen2's q/k/v projection biases: a sizeable fraction of the unit-scale projections (real
 * Qwen2 checkpoints carry large ones too), so a graph that dropped them would give other logits.
 */
export const QKV_BIAS_STD = 0.5

/** Multiplies columns [from, to) of a row-major [rows, width] weight by `gain` (e.g. q/k columns of a fused qkv). */
export function scaleColumns(w: Float32Array, width: number, from: number, to: number, gain: number): void {
  for (let row = 0; row < w.length / width; row++) {
    for (let col = from; col < to; col++) w[row * width + col] *= gain
  }
}
