import { definedNames, type Dim, type GraphIndex, type NodeInfo, type ValueInfo } from './onnx-graph-index.ts'
import { GRAPH_FIELD, noEdit, nodeRecord, valueInfoRecord, type GraphEdit } from './graph-edit.ts'

/**
 * The load-time edit that puts an Optimum-layout ("concat") decoder on the slot KV path
 * (slot-kv-cache.ts): in such a graph each layer's `present.{i}.key` is
 * Concat(past_key_values.{i}.key, k_new) on the sequence axis, and ONNX Runtime copies that whole
 * cache out every step (onnxruntime-node copies it again). The edit adds `k_new` itself as the
 * graph output `new_key_values.{i}.key` (through an Identity node, since an output is a value
 * name) and drops the `present.*` outputs, so only the step's new K/V leave the session; the
 * Concat stays, feeding the attention inside the graph.
 *
 * Why the result is exact: with the slot cache the past fed is the buffer's capacity C, masked by
 * attention_mask beyond each row's tokens, and the positions are fed as position_ids. HF graphs
 * build the causal mask as tril over [S, C+S] with diagonal C (C = the fed past length), so new
 * token i sees every past slot (the mask then keeps only the row's real ones) and new tokens
 * 0..i: what it sees in the concat layout. So the edit applies only where that reasoning holds:
 * the graph takes position_ids (otherwise positions follow the past length, which would be C),
 * it is a plain decoder (no `If` on use_cache_branch, whose branches are subgraphs), every
 * layer's key and value match the pattern, and the model has no sliding window (its mask
 * measures distances in columns, which the spare slots widen).
 */

export const pastName = (layer: number, kind: KvKind): string => `past_key_values.${layer}.${kind}`
export const presentName = (layer: number, kind: KvKind): string => `present.${layer}.${kind}`
export const newKvName = (layer: number, kind: KvKind): string => `new_key_values.${layer}.${kind}`

type KvKind = 'key' | 'value'
const KINDS: readonly KvKind[] = ['key', 'value']

/** A graph output the edit adds in place of a `present.*` one. */
export interface NewKvOutput {
  /** The output it replaces. */
  present: string
  name: string
  /** The Concat's second input: the step's new K or V. */
  from: string
  /** The past input's element type, which the slot cache writes the new K/V back as. */
  elemType: number
  /** Set where the Concat runs in another type than the past (a Cast between them): cast back. */
  castTo?: number
  /** present's shape with the sequence axis unknown; undefined where present declares none. */
  dims?: Dim[]
}

export type SlotKvMatch =
  /** The graph already has zerolayer's slot interface (new_key_values.* outputs). */
  | { kind: 'slots' }
  | { kind: 'edit'; layers: number; outputs: NewKvOutput[] }
  | { kind: 'concat'; why: string }

/** The ops a KV tensor may pass through between the past input, the Concat and `present.*`. */
const PASS_THROUGH = new Set(['Identity', 'Cast'])
const isDefaultDomain = (n: NodeInfo): boolean => n.domain === '' || n.domain === 'ai.onnx'

export function matchSlotKv(index: GraphIndex, config: { slidingWindow?: number } = {}): SlotKvMatch {
  const inputs = new Map(index.inputs.map((v) => [v.name, v]))
  const outputs = new Map(index.outputs.map((v) => [v.name, v]))
  if (outputs.has(newKvName(0, 'key'))) return { kind: 'slots' }
  const keep = (why: string): SlotKvMatch => ({ kind: 'concat', why })
  if (index.graphFields !== 1) return keep(`the file has ${index.graphFields} graph fields (protobuf would merge them): not edited`)
  let layers = 0
  while (inputs.has(pastName(layers, 'key'))) layers++
  if (layers === 0) return keep('the graph has no past_key_values.0.key input')
  if (!inputs.has('position_ids')) {
    return keep('the graph takes no position_ids: its positions follow the past length, which on the slot path would be the cache capacity')
  }
  if (inputs.has('use_cache_branch') || index.nodes.some((n) => n.opType === 'If')) {
    return keep('a merged decoder (use_cache_branch selects an If branch; its present.* come from subgraphs): not edited')
  }
  if (config.slidingWindow !== undefined) {
    return keep(`config.json sets sliding_window ${config.slidingWindow}: the mask measures the window in cache columns, which the slot cache's spare slots would widen`)
  }

  const producer = new Map<string, NodeInfo>()
  for (const n of index.nodes) for (const o of n.outputs) producer.set(o, n)
  const defined = definedNames(index)
  const matched: NewKvOutput[] = []
  for (let i = 0; i < layers; i++) {
    for (const kind of KINDS) {
      const m = matchLayer(i, kind, inputs, outputs, producer)
      if (typeof m === 'string') return keep(m)
      if (defined.has(m.name)) return keep(`the graph already defines a value named ${m.name}`)
      matched.push(m)
    }
  }
  const extra = index.outputs.find((o) => o.name.startsWith('present.') && !matched.some((m) => m.present === o.name))
  if (extra) return keep(`output ${extra.name} has no past_key_values input of its layer`)
  return { kind: 'edit', layers, outputs: matched }
}

/** The new output for one layer's key or value, or why the layer does not match. */
function matchLayer(i: number, kind: KvKind, inputs: Map<string, ValueInfo>, outputs: Map<string, ValueInfo>, producer: Map<string, NodeInfo>): NewKvOutput | string {
  const past = inputs.get(pastName(i, kind))
  const present = outputs.get(presentName(i, kind))
  if (!past) return `the graph has no ${pastName(i, kind)} input`
  if (!present) return `the graph has no ${presentName(i, kind)} output`
  if (past.dims?.length !== 4) return `${past.name} is not declared as a rank-4 tensor`
  if (past.elemType === undefined || present.elemType !== past.elemType) return `${present.name}'s element type is not ${past.name}'s`
  const pattern = `Concat(${past.name}, new) on the sequence axis`
  // Walks are bounded by the node count: a malformed graph with a cycle must not hang the load.
  let hops = producer.size
  let concat = producer.get(present.name)
  while (concat && isDefaultDomain(concat) && PASS_THROUGH.has(concat.opType) && hops-- > 0) concat = producer.get(concat.inputs[0]!)
  if (!concat || concat.opType !== 'Concat' || !isDefaultDomain(concat)) return `${present.name} is made by ${concat ? concat.opType : 'no node'}, not ${pattern}`
  const axis = concat.ints.get('axis')
  if (concat.inputs.length !== 2 || (axis !== 2n && axis !== -2n)) return `${present.name} is a Concat of ${concat.inputs.length} inputs on axis ${axis}, not ${pattern}`
  // Back from the Concat's first input to the past, through Identity/Cast; the Cast nearest the
  // Concat sets the type it concatenates in.
  let source = concat.inputs[0]!
  let concatType: number | undefined
  hops = producer.size
  for (let p = producer.get(source); p && isDefaultDomain(p) && PASS_THROUGH.has(p.opType) && hops-- > 0; p = producer.get(source)) {
    if (p.opType === 'Cast' && concatType === undefined) concatType = Number(p.ints.get('to'))
    source = p.inputs[0]!
  }
  if (source !== past.name) return `${present.name} is a Concat whose first input is ${source}, not ${past.name}`
  const d = present.dims
  return {
    present: present.name,
    name: newKvName(i, kind),
    from: concat.inputs[1]!,
    elemType: past.elemType,
    ...(concatType !== undefined && concatType !== past.elemType ? { castTo: past.elemType } : {}),
    ...(d?.length === 4 ? { dims: [d[0], d[1], undefined, d[3]] } : {}),
  }
}

/**
 * The edit as records: each replaced `present.*` output record becomes its new_key_values output,
 * in its place; the Identity/Cast nodes that make them are appended.
 */
export function slotKvEdit(index: GraphIndex, outputs: readonly NewKvOutput[]): GraphEdit {
  const byPresent = new Map(outputs.map((o) => [o.present, o]))
  const edit = noEdit()
  for (const o of index.outputs) {
    const n = byPresent.get(o.name)
    if (n) edit.replace.set(o.recordStart, valueInfoRecord(GRAPH_FIELD.output, n.name, n.elemType, n.dims))
  }
  for (const o of outputs) edit.append.push(nodeRecord(o.castTo === undefined ? 'Identity' : 'Cast', [o.from], o.name, o.castTo === undefined ? {} : { to: { int: o.castTo } }))
  return edit
}
