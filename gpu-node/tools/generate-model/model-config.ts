/** config.json and generation_config.json in Hugging Face's shapes for each family. */

import type { LlamaPreset, ModelPreset, PresetName } from './presets.ts'
import type { SpecialTokenIds } from './tokenizer-files.ts'

export function buildConfigJson(name: PresetName, p: ModelPreset, seed: number, ids: SpecialTokenIds): Record<string, unknown> {
  // kv_cache: which KV interface model.onnx has (the runner reads it from the outputs; this is for people).
  const zerolayer = { preset: name, seed, lm_head_bias: true, kv_cache: p.kvCache ?? 'concat' }
  if (p.family === 'gpt2') {
    return {
      architectures: ['GPT2LMHeadModel'],
      model_type: 'gpt2',
      vocab_size: p.vocabSize,
      n_embd: p.hidden,
      n_layer: p.layers,
      n_head: p.heads,
      n_inner: 4 * p.hidden,
      n_positions: p.maxPositions,
      n_ctx: p.maxPositions,
      activation_function: 'gelu',
      layer_norm_epsilon: 1e-5,
      tie_word_embeddings: false,
      bos_token_id: ids.eos,
      eos_token_id: ids.eos,
      use_cache: true,
      torch_dtype: 'float32',
      zerolayer,
    }
  }
  if (p.family === 'qwen2') return qwen2Config(p, ids, zerolayer)
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    vocab_size: p.vocabSize,
    hidden_size: p.hidden,
    intermediate_size: p.intermediate,
    num_hidden_layers: p.layers,
    num_attention_heads: p.heads,
    num_key_value_heads: p.kvHeads,
    head_dim: p.hidden / p.heads,
    max_position_embeddings: p.maxPositions,
    rope_theta: p.ropeTheta,
    rms_norm_eps: p.rmsNormEps,
    hidden_act: 'silu',
    attention_bias: false,
    mlp_bias: false,
    tie_word_embeddings: false,
    bos_token_id: ids.eos,
    eos_token_id: ids.eos,
    use_cache: true,
    torch_dtype: 'float32',
    zerolayer,
  }
}

/**
 * What transformers' Qwen2Config.save_pretrained writes (keys sorted, as it writes them): no
 * head_dim (hidden_size / num_attention_heads) and no attention_bias key (Qwen2's q/k/v biases are
 * part of the architecture); no sliding window.
 */
function qwen2Config(p: LlamaPreset, ids: SpecialTokenIds, zerolayer: object): Record<string, unknown> {
  return {
    architectures: ['Qwen2ForCausalLM'],
    attention_dropout: 0,
    bos_token_id: ids.eos,
    eos_token_id: ids.eos,
    hidden_act: 'silu',
    hidden_size: p.hidden,
    initializer_range: 0.02,
    intermediate_size: p.intermediate,
    max_position_embeddings: p.maxPositions,
    max_window_layers: p.layers,
    model_type: 'qwen2',
    num_attention_heads: p.heads,
    num_hidden_layers: p.layers,
    num_key_value_heads: p.kvHeads,
    rms_norm_eps: p.rmsNormEps,
    rope_scaling: null,
    rope_theta: p.ropeTheta,
    sliding_window: null,
    tie_word_embeddings: false,
    torch_dtype: 'float32',
    use_cache: true,
    use_sliding_window: false,
    vocab_size: p.vocabSize,
    zerolayer,
  }
}

export function buildGenerationConfig(ids: SpecialTokenIds): Record<string, unknown> {
  return { bos_token_id: ids.eos, eos_token_id: [ids.eos, ids.imEnd], pad_token_id: ids.eos }
}
