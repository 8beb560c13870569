/**
 * Writes a complete generated model directory in the layout of a Hugging Face Optimum
 * "decoder with past" export: model.onnx (with `externalData`, its weights in model.onnx_data
 * beside it), config.json, generation_config.json, tokenizer.json, tokenizer_config.json, plus
 * GENERATOR_STAMP. Same preset and seed => byte-identical files. Every file is written beside its
 * target and renamed, so a reader (or a second process regenerating the same directory) never
 * sees a half-written file.
 */

import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildGptGraph } from './gpt-graph.ts'
import { buildLlamaGraph } from './llama-graph.ts'
import { buildVocabBias } from './lm-head-bias.ts'
import { buildConfigJson, buildGenerationConfig } from './model-config.ts'
import { writeOnnxModel, type ExternalDataFile, type OnnxGraph } from './onnx-writer.ts'
import { DEFAULT_SEED, PRESETS, type ModelPreset, type PresetName } from './presets.ts'
import { buildTokenizerFiles } from './tokenizer-files.ts'

export interface GenerateModelOptions {
  preset: PresetName
  outDir: string
  seed?: number
  /**
   * Also declare Optimum's optional inputs (use_cache_branch, num_logits_to_keep; see
   * decoder-io.ts). Defaults to the preset's own flag; weights are the same either way.
   */
  optionalInputs?: boolean
  /** Declare `num_logits_to_keep` alone; defaults to the preset's own flag. */
  logitsToKeep?: boolean
  /** KV interface; defaults to the preset's own (see presets.ts). */
  kvCache?: 'concat' | 'slots'
  /** No position_ids input (positions from the past length); defaults to the preset's own. */
  derivedPositions?: boolean
  /**
   * Weights as ONNX external data in EXTERNAL_DATA_FILE beside model.onnx (external-data.ts), as
   * torch.onnx and Optimum write models over 2 GB. Off by default; the values are the same.
   */
  externalData?: boolean
  /** Progress lines (the CLI prints them). */
  onProgress?: (message: string) => void
}

export interface GeneratedModel {
  outDir: string
  /** model.onnx size in bytes. */
  modelBytes: number
  /** EXTERNAL_DATA_FILE's size in bytes; 0 without external data. */
  externalDataBytes: number
}

/** The external data file's name, as torch.onnx and Optimum name it. */
export const EXTERNAL_DATA_FILE = 'model.onnx_data'

/**
 * Bump whenever the generated files change for the same preset and seed (graph structure,
 * declared inputs, weights). Cached model directories whose stamp differs are regenerated
 * (ensure-model.ts), so nobody keeps benchmarking or serving a stale graph.
 *   2: scores as K·Qᵀ (no copy of the key cache), `num_logits_to_keep` on the small presets.
 *   3: the zerolayer presets (all but tiny-optimum-legacy) use the slot KV interface
 *      (cache-attention-graph.ts): past = the runner's fixed-capacity cache, outputs = new K/V only.
 */
export const GENERATOR_VERSION = '4'
/** The file in a generated directory holding GENERATOR_VERSION; written last. */
export const GENERATOR_STAMP = 'zerolayer-generator-version'

/** True when `dir` holds a complete model made by this generator version. */
export function isCurrentGeneratedModel(dir: string): boolean {
  const stamp = join(dir, GENERATOR_STAMP)
  return existsSync(join(dir, 'model.onnx')) && existsSync(stamp) && readFileSync(stamp, 'utf8').trim() === GENERATOR_VERSION
}

const ONNX_IR_VERSION = 8
const ONNX_OPSET = 17

export async function generateModel(options: GenerateModelOptions): Promise<GeneratedModel> {
  const { preset: name, outDir } = options
  const seed = options.seed ?? DEFAULT_SEED
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`seed must be an integer in [0, 2^32), got ${seed}`)
  const base: ModelPreset = PRESETS[name]
  const p: ModelPreset = {
    ...base,
    ...(options.optionalInputs === undefined ? {} : { optionalInputs: options.optionalInputs }),
    ...(options.logitsToKeep === undefined ? {} : { logitsToKeep: options.logitsToKeep }),
    ...(options.kvCache === undefined ? {} : { kvCache: options.kvCache }),
    ...(options.derivedPositions === undefined ? {} : { derivedPositions: options.derivedPositions }),
  }
  const log = options.onProgress ?? (() => {})
  mkdirSync(outDir, { recursive: true })

  const tok = buildTokenizerFiles(p.vocabSize, p.maxPositions)
  writeJson(join(outDir, 'tokenizer.json'), tok.tokenizerJson)
  writeJson(join(outDir, 'tokenizer_config.json'), tok.tokenizerConfig)
  writeJson(join(outDir, 'config.json'), buildConfigJson(name, p, seed, tok.specialIds))
  writeJson(join(outDir, 'generation_config.json'), buildGenerationConfig(tok.specialIds))
  log(`tokenizer: ${tok.bpeTokens.length} BPE tokens + 3 special tokens`)

  const bias = buildVocabBias(tok.bpeTokens, tok.specialIds)
  const graph: OnnxGraph = p.family === 'gpt2' ? buildGptGraph(p, seed, bias) : buildLlamaGraph(p, seed, bias)
  log(`graph: ${graph.nodes.length} nodes, ${graph.initializers.length} initializers`)

  // Write beside the target and rename, so a reader never sees a half-written model.onnx (the
  // data file first: a new model.onnx never refers to an old one).
  const modelPath = join(outDir, 'model.onnx')
  const partial = partialPath(modelPath)
  const dataPath = join(outDir, EXTERNAL_DATA_FILE)
  const external: ExternalDataFile | undefined = options.externalData ? { location: EXTERNAL_DATA_FILE, path: partialPath(dataPath) } : undefined
  const written = writeOnnxModel(partial, {
    irVersion: ONNX_IR_VERSION,
    opsetVersion: ONNX_OPSET,
    producerName: 'zerolayer-generate',
    producerVersion: GENERATOR_VERSION,
    graph,
    metadata: { 'zerolayer.preset': name, 'zerolayer.seed': String(seed) },
  }, external)
  if (external) renameSync(external.path, dataPath)
  renameSync(partial, modelPath)
  // A data file left by an earlier external-data run belongs to no model now.
  if (!external) rmSync(dataPath, { force: true })
  writeAtomic(join(outDir, GENERATOR_STAMP), `${GENERATOR_VERSION}\n`)
  return { outDir, ...written }
}

function writeJson(path: string, value: unknown): void {
  writeAtomic(path, `${JSON.stringify(value, null, 2)}\n`)
}

function writeAtomic(path: string, text: string): void {
  const partial = partialPath(path)
  writeFileSync(partial, text)
  renameSync(partial, path)
}

const partialPath = (path: string): string => `${path}.partial-${process.pid}`
