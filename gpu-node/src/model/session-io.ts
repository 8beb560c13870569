import type * as ort from 'onnxruntime-node'
import type { ModelConfig } from './model-dir.ts'
import { isKvType, type KvType } from './tensor-dtype.ts'

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
  /** The KV tensors' element type, as declared: the caches hold it as is, the budget counts its bytes. */
  kvType: KvType
  /**
   * 'concat': Optimum's interface, present.* = past ⧺ new (fed back as the next past).
   * 'slots': zerolayer's generated variant: past is the runner's fixed-capacity cache, the
   * outputs `new_key_values.*` carry only the step's new K/V (slot-kv-cache.ts).
   */
  kvCache: 'concat' | 'slots'
  pastKey: string[]
  pastValue: string[]
  /** The K/V outputs: present.* (concat) or new_key_values.* (slots). */
  presentKey: string[]
  presentValue: string[]
  hasPositionIds: boolean
  hasUseCacheBranch: boolean
  hasNumLogitsToKeep: boolean
}

/** `file` names the graph in errors (the model directory's onnxFile). */
export function readSessionIo(session: ort.InferenceSession, config: ModelConfig, file = 'model.onnx'): SessionIo {
  const inputs = new Set(session.inputNames)
  const outputs = new Set(session.outputNames)
  for (const name of ['input_ids', 'attention_mask']) {
    if (!inputs.has(name)) throw new Error(`${file}: input "${name}" missing; expected an Optimum decoder-with-past export`)
  }
  if (!outputs.has('logits')) throw new Error(`${file}: output "logits" missing`)
  let numLayers = 0
  while (inputs.has(`past_key_values.${numLayers}.key`)) numLayers++
  if (numLayers === 0) throw new Error(`${file}: no past_key_values.0.key input; export the model "with past" (Optimum task text-generation-with-past)`)
  const idx = Array.from({ length: numLayers }, (_, i) => i)
  const kvCache = outputs.has('new_key_values.0.key') ? 'slots' : 'concat'
  const out = kvCache === 'slots' ? 'new_key_values' : 'present'
  const presentKey = idx.map((i) => `${out}.${i}.key`)
  const presentValue = idx.map((i) => `${out}.${i}.value`)
  for (const name of [...presentKey, ...presentValue]) if (!outputs.has(name)) throw new Error(`${file}: output "${name}" missing`)
  const meta = session.inputMetadata.find((m) => m.name === 'past_key_values.0.key')
  const shape = meta && meta.isTensor ? meta.shape : []
  const numKvHeads = typeof shape[1] === 'number' ? shape[1] : config.numKvHeads
  const headDim = typeof shape[3] === 'number' ? shape[3] : config.headDim
  const kvType = declaredKvType(session, file, [...idx.flatMap((i) => [`past_key_values.${i}.key`, `past_key_values.${i}.value`]), ...presentKey, ...presentValue])
  const logits = session.outputMetadata.find((m) => m.name === 'logits')
  if (logits && logits.isTensor && !isKvType(logits.type)) throw new Error(`${file}: logits type ${logits.type} is not supported (float32, float16)`)
  // A slot cache's past is its capacity, not a length: positions derived from it would be wrong for every row.
  if (kvCache === 'slots' && !inputs.has('position_ids')) throw new Error(`${file}: a new_key_values (slot KV) graph must take position_ids`)
  return {
    numLayers,
    numKvHeads,
    headDim,
    kvType,
    kvCache,
    pastKey: idx.map((i) => `past_key_values.${i}.key`),
    pastValue: idx.map((i) => `past_key_values.${i}.value`),
    presentKey,
    presentValue,
    hasPositionIds: inputs.has('position_ids'),
    hasUseCacheBranch: inputs.has('use_cache_branch'),
    hasNumLogitsToKeep: inputs.has('num_logits_to_keep'),
  }
}

/** The one float type every KV input and output declares (float32 when the session does not say). */
function declaredKvType(session: ort.InferenceSession, file: string, names: string[]): KvType {
  const meta = [...session.inputMetadata, ...session.outputMetadata]
  const types = new Set(names.map((n) => meta.find((m) => m.name === n)).map((m) => (m && m.isTensor ? m.type : 'float32')))
  const [type] = types
  if (types.size > 1) throw new Error(`${file}: KV tensors mix types (${[...types].join(', ')}); expected one`)
  if (!isKvType(type)) throw new Error(`${file}: KV cache type ${type} is not supported (float32, float16)`)
  return type
}
