/**
 * The default model's recipe: its shape, its training schedule and its tokenizer, in one place,
 * so `npm run model:train` and the test that checks the committed files agree.
 *
 * The shape: a Llama-style decoder of ~15.7 M parameters (8 layers, width 384, 6 query heads
 * sharing 2 KV heads, SwiGLU 1024, untied LM head), a 4096-token byte-level BPE, 1024 positions.
 * The schedule: 3400 steps of 4096 tokens (~13.9 M tokens, ~4.3 passes over the training ids), AdamW
 * at 1.5e-3 with 60 warm-up steps and a cosine to a tenth; the last quarter at the full context.
 * About an hour on 2 cores.
 */
import { EOS_TOKEN, IM_END } from '../generate-model/tokenizer-files.ts'
import { FIM_PAD } from './code-tokenizer.ts'

export const MODEL_NAME = 'zl-code'
/** Where the trained model is committed (models/ holds generated, uncommitted ones). */
export const MODEL_DIR = `trained/${MODEL_NAME}`
/** Scratch space: the corpus, token ids, checkpoint, float32 export and the run's log (ignored by git). */
export const WORK_DIR = 'models/.train'
/** The graph that ships: onnx-community's name for a 4-bit MatMulNBits export (quantize.py). */
export const QUANTIZED_GRAPH = 'onnx/model_q4.onnx'

export const SHAPE = {
  vocab_size: 4096,
  hidden_size: 384,
  intermediate_size: 1024,
  num_hidden_layers: 8,
  num_attention_heads: 6,
  num_key_value_heads: 2,
  max_position_embeddings: 1024,
  rms_norm_eps: 1e-6,
  rope_theta: 10000.0,
}

export const SCHEDULE = {
  seed: 1,
  threads: 2,
  steps: 3400,
  warmup: 60,
  long_share: 0.25,
  short_context: 512,
  batch_tokens: 4096,
  lr: 0.0015,
  weight_decay: 0.1,
  /** Share of training windows that start where a sample starts (train.py `windows`). */
  aligned_share: 0.5,
}

/** The dataset's own seed (which spans become fill-in-the-middle samples, and where they are cut). */
export const DATA_SEED = 1

/** config.json and generation_config.json, transformers' names; `ids` from the trained tokenizer. */
export function configFiles(ids: (token: string) => number): { config: Record<string, unknown>; generationConfig: Record<string, unknown> } {
  const eos = ids(EOS_TOKEN)
  return {
    config: {
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      ...SHAPE,
      hidden_act: 'silu',
      tie_word_embeddings: false,
      bos_token_id: eos,
      eos_token_id: eos,
      use_cache: true,
      torch_dtype: 'float32',
    },
    // A completion ends at <|endoftext|>, a chat turn at <|im_end|>.
    generationConfig: { bos_token_id: eos, eos_token_id: [eos, ids(IM_END)], pad_token_id: ids(FIM_PAD) },
  }
}
