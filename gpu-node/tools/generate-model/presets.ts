/** The generated model shapes. Sizes are the whole story: weights come from the seed. */

/**
 * Optional inputs some Hugging Face Optimum exports declare: `use_cache_branch` (bool [1], merged
 * "--legacy" decoders) and `num_logits_to_keep` (int64 scalar; logits only for the last N
 * positions). Off by default; weights never depend on it.
 */
interface OptionalInputsFlag {
  optionalInputs?: boolean
  /**
   * Declares `num_logits_to_keep` alone (as newer Optimum exports do). The runner feeds 1, so a
   * prefill computes the LM head (V×d per position, ~40 % of `small`'s FLOPs) for the last
   * position only instead of every prompt position.
   */
  logitsToKeep?: boolean
  /**
   * KV interface: 'concat' (default) is Optimum's, present = past ⧺ new; 'slots' takes the
   * runner's fixed-capacity cache buffers as past and outputs only the new K/V (see
   * cache-attention-graph.ts). Weights never depend on it.
   */
  kvCache?: 'concat' | 'slots'
  /**
   * No `position_ids` input: the graph derives positions from the past length,
   * arange(past, past + S) for every row, as older Optimum GPT-2 exports do. Concat KV only
   * (a slot cache's past is its capacity, not a length). Weights never depend on it.
   */
  derivedPositions?: boolean
}

export interface GptPreset extends OptionalInputsFlag {
  family: 'gpt2'
  vocabSize: number
  /** Residual width (n_embd). */
  hidden: number
  layers: number
  heads: number
  /** Rows of the learned position table; position_ids must stay below this. */
  maxPositions: number
}

/** Llama style; 'qwen2' is the same shape with biases on the q/k/v projections (o_proj has none). */
export interface LlamaPreset extends OptionalInputsFlag {
  family: 'llama' | 'qwen2'
  vocabSize: number
  hidden: number
  /** SwiGLU inner width. */
  intermediate: number
  layers: number
  heads: number
  /** Key/value heads carried in past/present; each serves heads / kvHeads query heads. */
  kvHeads: number
  maxPositions: number
  ropeTheta: number
  rmsNormEps: number
}

export type ModelPreset = GptPreset | LlamaPreset

export const PRESETS = {
  tiny: { family: 'gpt2', vocabSize: 512, hidden: 256, layers: 4, heads: 4, maxPositions: 1024, kvCache: 'slots' },
  /** `tiny` (same seed, same weights) with Optimum's interface: concat KV and the optional inputs. */
  'tiny-optimum-legacy': { family: 'gpt2', vocabSize: 512, hidden: 256, layers: 4, heads: 4, maxPositions: 1024, optionalInputs: true },
  /** `tiny` (same seed, same weights) in the older Optimum GPT-2 layout: concat KV, no position_ids input. */
  'tiny-derived-positions': { family: 'gpt2', vocabSize: 512, hidden: 256, layers: 4, heads: 4, maxPositions: 1024, derivedPositions: true },
  small: { family: 'gpt2', vocabSize: 32000, hidden: 512, layers: 8, heads: 8, maxPositions: 2048, logitsToKeep: true, kvCache: 'slots' },
  'tiny-llama': {
    family: 'llama', vocabSize: 512, hidden: 256, intermediate: 704, layers: 4, heads: 8, kvHeads: 2,
    maxPositions: 2048, ropeTheta: 10000, rmsNormEps: 1e-6, kvCache: 'slots',
  },
  'small-llama': {
    family: 'llama', vocabSize: 32000, hidden: 512, intermediate: 1408, layers: 8, heads: 8, kvHeads: 2,
    maxPositions: 2048, ropeTheta: 10000, rmsNormEps: 1e-6, logitsToKeep: true, kvCache: 'slots',
  },
  /** `tiny-llama` (same seed, same weights) plus Qwen2's q/k/v biases, with Qwen2's config.json. */
  'tiny-qwen2': {
    family: 'qwen2', vocabSize: 512, hidden: 256, intermediate: 704, layers: 4, heads: 8, kvHeads: 2,
    maxPositions: 2048, ropeTheta: 10000, rmsNormEps: 1e-6, kvCache: 'slots',
  },
} as const satisfies Record<string, ModelPreset>

export type PresetName = keyof typeof PRESETS

export const DEFAULT_SEED = 42

export function isPresetName(name: string): name is PresetName {
  return Object.hasOwn(PRESETS, name)
}

export function usesSlotCache(p: ModelPreset): boolean {
  return p.kvCache === 'slots'
}

export function headDim(p: ModelPreset): number {
  return p.hidden / p.heads
}

/** Whether the graph declares `num_logits_to_keep` (either flag). */
export function declaresLogitsToKeep(p: ModelPreset): boolean {
  return p.optionalInputs === true || p.logitsToKeep === true
}

/** KV heads in past/present (GPT-2 style models have one per query head). */
export function kvHeadCount(p: ModelPreset): number {
  return p.family === 'gpt2' ? p.heads : p.kvHeads
}
