import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { z } from 'zod'
import { toSamplingRequest } from '../../../shared/src/dialects/sampling-fields.ts'
import type { SamplingRequest } from '../../../shared/src/generation.ts'

/**
 * A model directory in the layout of a Hugging Face Optimum export: model.onnx, config.json,
 * tokenizer.json, tokenizer_config.json, generation_config.json. Reading it validates every
 * file once and fails with one message naming the file and what is wrong.
 */

/** Where newer transformers save a tokenizer's chat template; it wins over tokenizer_config.json's. */
export const CHAT_TEMPLATE_FILE = 'chat_template.jinja'

/**
 * Where exports put the decoder-with-past graph, in the order looked for when MODEL_FILE is not
 * set: Optimum's `model.onnx`, its merged (`use_cache_branch`) and with-past decoders, then the
 * same under `onnx/` (onnx-community's layout, which transformers.js reads). A directory holding
 * several variants (`onnx/model_quantized.onnx`, …) serves the one MODEL_FILE names.
 */
export const MODEL_FILES = [
  'model.onnx',
  'decoder_model_merged.onnx',
  'decoder_with_past_model.onnx',
  'onnx/model.onnx',
  'onnx/decoder_model_merged.onnx',
  'onnx/decoder_with_past_model.onnx',
  // A directory that ships only onnx-community's 4-bit variant (this repository's trained model).
  'onnx/model_q4.onnx',
] as const
export class ModelDirError extends Error {
  constructor(
    readonly file: string,
    detail: string,
  ) {
    super(`model directory: ${file}: ${detail}`)
    this.name = 'ModelDirError'
  }
}

/** The architecture numbers the runner and scheduler need, whatever the config's dialect. */
export interface ModelConfig {
  modelType: string
  vocabSize: number
  numLayers: number
  numHeads: number
  numKvHeads: number
  headDim: number
  contextLength: number
  /**
   * config.json's sliding_window where the model uses one (not where use_sliding_window is
   * false, as Qwen2's configs say): attention then depends on the distance between columns,
   * which the slot KV layout's spare slots would widen (kv-path.ts keeps such a graph on concat).
   */
  slidingWindow?: number
}

export interface ModelDir {
  path: string
  onnxPath: string
  /** The graph's file, relative to `path` (errors and logs name it). */
  onnxFile: string
  /** The id served as `model` (the directory's name unless config says otherwise). */
  modelId: string
  config: ModelConfig
  tokenizerJson: Record<string, unknown>
  tokenizerConfig: Record<string, unknown>
  /** tokenizer_config.json's special tokens and whether plain text gets BOS/EOS (tokenizer.ts). */
  specials: TokenizerSpecials
  /** generation_config.json's defaults for what a request leaves unset. */
  generationDefaults: GenerationDefaults
  /** `chat_template.jinja` (newer transformers save the template there), when present. */
  chatTemplateJinja?: string
  eosTokenIds: number[]
}

const positiveInt = z.number().int().positive()

export const SPECIAL_TOKEN_NAMES = ['bos_token', 'eos_token', 'unk_token', 'pad_token'] as const
export type SpecialTokenName = (typeof SPECIAL_TOKEN_NAMES)[number]

/** A special token as tokenizer_config.json writes it: its text, or an AddedToken object. */
const SpecialToken = z
  .union([z.string(), z.object({ content: z.string() }).loose()])
  .nullish()
  .transform((v) => (v === null || v === undefined ? undefined : typeof v === 'string' ? v : v.content))

/**
 * What tokenizer_config.json says beyond tokenizer.json: the special tokens' texts (chat
 * templates use them, e.g. `{{ bos_token }}`) and `add_bos_token` / `add_eos_token`, which
 * transformers applies over tokenizer.json's post-processor when they are declared.
 */
const TokenizerSpecialsSchema = z
  .object({
    bos_token: SpecialToken,
    eos_token: SpecialToken,
    unk_token: SpecialToken,
    pad_token: SpecialToken,
    add_bos_token: z.boolean().nullish(),
    add_eos_token: z.boolean().nullish(),
  })
  .loose()
  .transform((c) => ({
    tokens: Object.fromEntries(SPECIAL_TOKEN_NAMES.flatMap((n) => (c[n] === undefined ? [] : [[n, c[n]]]))) as Partial<Record<SpecialTokenName, string>>,
    ...(typeof c.add_bos_token === 'boolean' ? { addBos: c.add_bos_token } : {}),
    ...(typeof c.add_eos_token === 'boolean' ? { addEos: c.add_eos_token } : {}),
  }))

export type TokenizerSpecials = z.infer<typeof TokenizerSpecialsSchema>

/** GPT-2 and Llama/Qwen2 families name the same numbers differently. */
const HfConfig = z
  .object({
    model_type: z.string(),
    vocab_size: positiveInt,
    n_embd: positiveInt.optional(),
    n_layer: positiveInt.optional(),
    n_head: positiveInt.optional(),
    n_positions: positiveInt.optional(),
    hidden_size: positiveInt.optional(),
    num_hidden_layers: positiveInt.optional(),
    num_attention_heads: positiveInt.optional(),
    num_key_value_heads: positiveInt.optional(),
    head_dim: positiveInt.optional(),
    max_position_embeddings: positiveInt.optional(),
    sliding_window: positiveInt.nullish(),
    use_sliding_window: z.boolean().optional(),
    eos_token_id: z.union([z.number().int(), z.array(z.number().int())]).nullish(),
    zerolayer: z.object({ preset: z.string() }).partial().optional(),
  })
  .loose()

/**
 * The model author's defaults for what a request leaves unset: the fields vLLM takes from
 * generation_config.json (`--generation-config auto`, its default): temperature, top_p, top_k,
 * min_p, repetition_penalty and max_new_tokens (the default max tokens; still capped by the
 * context). Other keys (do_sample, num_beams, …) are not sampling defaults here, as in vLLM.
 */
export interface GenerationDefaults {
  sampling: SamplingRequest
  maxNewTokens?: number
}

const GenerationConfig = z
  .object({
    eos_token_id: z.union([z.number().int(), z.array(z.number().int())]).nullish(),
    temperature: z.number().min(0).nullish(),
    top_p: z.number().gt(0).max(1).nullish(),
    top_k: z.int().min(-1).nullish(),
    min_p: z.number().min(0).max(1).nullish(),
    repetition_penalty: z.number().gt(0).nullish(),
    max_new_tokens: positiveInt.nullish(),
  })
  .loose()

function toGenerationDefaults(g: z.infer<typeof GenerationConfig>): GenerationDefaults {
  // The same names (and meaning) as the request fields vLLM accepts: one conversion for both.
  const sampling = toSamplingRequest({ temperature: g.temperature, top_p: g.top_p, top_k: g.top_k, min_p: g.min_p, repetition_penalty: g.repetition_penalty })
  return { sampling, ...(g.max_new_tokens != null ? { maxNewTokens: g.max_new_tokens } : {}) }
}

/** `modelFile`: the graph's path relative to `path` (MODEL_FILE); by default the first of MODEL_FILES present. */
export function readModelDir(path: string, modelFile?: string): ModelDir {
  if (!existsSync(path)) throw new ModelDirError(path, 'directory does not exist (run `npm run model:tiny` to generate the tiny model)')
  const onnxFile = modelFile ?? MODEL_FILES.find((f) => existsSync(join(path, f)))
  if (onnxFile === undefined) throw new ModelDirError('model.onnx', `missing in ${path} (looked for ${MODEL_FILES.join(', ')}; set MODEL_FILE for another name)`)
  const onnxPath = join(path, onnxFile)
  if (!existsSync(onnxPath)) throw new ModelDirError(onnxFile, `missing in ${path} (MODEL_FILE)`)
  const rawConfig = parseWith(path, 'config.json', HfConfig)
  const config = toModelConfig(rawConfig)
  const tokenizerJson = parseWith(path, 'tokenizer.json', z.object({ model: z.object({ type: z.string() }).loose() }).loose())
  const tokenizerConfig = parseWith(path, 'tokenizer_config.json', z.object({}).loose())
  const specials = parseWith(path, 'tokenizer_config.json', TokenizerSpecialsSchema)
  const generation = existsSync(join(path, 'generation_config.json')) ? parseWith(path, 'generation_config.json', GenerationConfig) : {}
  const generationDefaults = toGenerationDefaults(generation)
  const eos = generation.eos_token_id ?? rawConfig.eos_token_id
  const eosTokenIds = eos === undefined || eos === null ? [] : Array.isArray(eos) ? eos : [eos]
  const modelId = path.replace(/\/+$/, '').split('/').pop() || 'model'
  const jinjaPath = join(path, CHAT_TEMPLATE_FILE)
  const chatTemplateJinja = existsSync(jinjaPath) ? readFileSync(jinjaPath, 'utf8') : undefined
  return { path, onnxPath, onnxFile, modelId, config, tokenizerJson, tokenizerConfig, specials, generationDefaults, ...(chatTemplateJinja !== undefined ? { chatTemplateJinja } : {}), eosTokenIds }
}

function toModelConfig(c: z.infer<typeof HfConfig>): ModelConfig {
  const hidden = c.hidden_size ?? c.n_embd
  const numLayers = c.num_hidden_layers ?? c.n_layer
  const numHeads = c.num_attention_heads ?? c.n_head
  const contextLength = c.max_position_embeddings ?? c.n_positions
  const missing = Object.entries({ hidden_size: hidden, num_hidden_layers: numLayers, num_attention_heads: numHeads, max_position_embeddings: contextLength })
    .filter(([, v]) => v === undefined)
    .map(([k]) => k)
  if (missing.length) throw new ModelDirError('config.json', `missing ${missing.join(', ')} (or their GPT-2 names n_embd, n_layer, n_head, n_positions)`)
  return {
    modelType: c.model_type,
    vocabSize: c.vocab_size,
    numLayers: numLayers!,
    numHeads: numHeads!,
    numKvHeads: c.num_key_value_heads ?? numHeads!,
    headDim: c.head_dim ?? hidden! / numHeads!,
    contextLength: contextLength!,
    ...(c.sliding_window != null && c.use_sliding_window !== false ? { slidingWindow: c.sliding_window } : {}),
  }
}

function parseWith<T extends z.ZodType>(dir: string, file: string, schema: T): z.infer<T> {
  const full = join(dir, file)
  if (!existsSync(full)) throw new ModelDirError(file, `missing in ${dir}`)
  let json: unknown
  try {
    json = JSON.parse(readFileSync(full, 'utf8'))
  } catch (e) {
    throw new ModelDirError(file, `is not valid JSON (${(e as Error).message})`)
  }
  const parsed = schema.safeParse(json)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]
    throw new ModelDirError(file, `${issue.path.join('.') || '(root)'}: ${issue.message}`)
  }
  return parsed.data
}
