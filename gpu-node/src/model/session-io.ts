import type * as ort from 'onnxruntime-node'
import type { ModelConfig } from './model-dir.ts'

/**
 * What an Optimum-style decoder session expects, read from the session itself rather than
 * assumed: KV input/output names per layer, the KV head count and head size, and which
 * optional inputs are declared (FACTS.md: feed position_ids, use_cache_branch and
 * num_logits_to_keep only when declared; symbolic dim names vary between exports).
 */
export interface SessionIo {
  numLayers: number
  numKvHeads: number
  headDim: number
  pastKey: string[]
  pastValue: string[]
  presentKey: string[]
  presentValue: string[]
  hasPositionIds: boolean
  hasUseCacheBranch: boolean
  hasNumLogitsToKeep: boolean
}

export function readSessionIo(session: ort.InferenceSession, config: ModelConfig): SessionIo {
  const inputs = new Set(session.inputNames)
  const outputs = new Set(session.outputNames)
  for (const name of ['input_ids', 'attention_mask']) {
    if (!inputs.has(name)) throw new Error(`model.onnx: input "${name}" missing; expected an Optimum decoder-with-past export`)
  }
  if (!outputs.has('logits')) throw new Error('model.onnx: output "logits" missing')
  let numLayers = 0
  while (inputs.has(`past_key_values.${numLayers}.key`)) numLayers++
  if (numLayers === 0) throw new Error('model.onnx: no past_key_values.0.key input; export the model "with past" (Optimum task text-generation-with-past)')
  const idx = Array.from({ length: numLayers }, (_, i) => i)
  const presentKey = idx.map((i) => `present.${i}.key`)
  for (const name of presentKey) if (!outputs.has(name)) throw new Error(`model.onnx: output "${name}" missing`)
  const meta = session.inputMetadata.find((m) => m.name === 'past_key_values.0.key')
  const shape = meta && meta.isTensor ? meta.shape : []
  const numKvHeads = typeof shape[1] === 'number' ? shape[1] : config.numKvHeads
  const headDim = typeof shape[3] === 'number' ? shape[3] : config.headDim
  if (meta && meta.isTensor && meta.type !== 'float32') throw new Error(`model.onnx: KV cache type ${meta.type} is not supported (float32 only)`)
  return {
    numLayers,
    numKvHeads,
    headDim,
    pastKey: idx.map((i) => `past_key_values.${i}.key`),
    pastValue: idx.map((i) => `past_key_values.${i}.value`),
    presentKey,
    presentValue: idx.map((i) => `present.${i}.value`),
    hasPositionIds: inputs.has('position_ids'),
    hasUseCacheBranch: inputs.has('use_cache_branch'),
    hasNumLogitsToKeep: inputs.has('num_logits_to_keep'),
  }
}
