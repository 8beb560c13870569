/**
 * Writes a complete generated model directory in the layout of a Hugging Face Optimum
 * "decoder with past" export: model.onnx, config.json, generation_config.json,
 * tokenizer.json, tokenizer_config.json. Same preset and seed => byte-identical files.
 */

import { mkdirSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildGptGraph } from './gpt-graph.ts'
import { buildLlamaGraph } from './llama-graph.ts'
import { buildVocabBias } from './lm-head-bias.ts'
import { buildConfigJson, buildGenerationConfig } from './model-config.ts'
import { writeOnnxModel, type OnnxGraph } from './onnx-writer.ts'
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
  /** Progress lines (the CLI prints them). */
  onProgress?: (message: string) => void
}

export interface GeneratedModel {
  outDir: string
  /** model.onnx size in bytes. */
  modelBytes: number
}

const ONNX_IR_VERSION = 8
const ONNX_OPSET = 17

export async function generateModel(options: GenerateModelOptions): Promise<GeneratedModel> {
  const { preset: name, outDir } = options
  const seed = options.seed ?? DEFAULT_SEED
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`seed must be an integer in [0, 2^32), got ${seed}`)
  const base: ModelPreset = PRESETS[name]
  const p: ModelPreset = options.optionalInputs === undefined ? base : { ...base, optionalInputs: options.optionalInputs }
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

  // Write beside the target and rename, so a reader never sees a half-written model.onnx.
  const modelPath = join(outDir, 'model.onnx')
  const partial = `${modelPath}.partial-${process.pid}`
  const modelBytes = writeOnnxModel(partial, {
    irVersion: ONNX_IR_VERSION,
    opsetVersion: ONNX_OPSET,
    producerName: 'zerolayer-generate',
    producerVersion: '1',
    graph,
    metadata: { 'zerolayer.preset': name, 'zerolayer.seed': String(seed) },
  })
  renameSync(partial, modelPath)
  return { outDir, modelBytes }
}

function writeJson(path: string, value: unknown): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`)
}
