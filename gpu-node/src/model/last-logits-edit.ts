import { GRAPH_FIELD, INT64, noEdit, nodeRecord, valueInfoRecord, type GraphEdit } from './graph-edit.ts'
import { definedNames, type GraphIndex, type NodeInfo } from './onnx-graph-index.ts'
import { forEachField, type FileReader } from './proto-file.ts'
import { bytesField, concat, stringField } from './proto-encode.ts'

/**
 * The load-time edit that gives a decoder Optimum's `num_logits_to_keep` input where its export
 * left it out (transformers.js-era exports, torch.onnx of a plain forward): the LM head then
 * multiplies only the last N positions' hidden states by the vocabulary matrix, N fed per step
 * (1 for a step that samples once per row; 0 keeps every position, as in transformers). Without
 * it a prefill chunk of S tokens runs the head over all S positions and copies S·V logits out of
 * the session to read one row of them; with a vocabulary large beside the model's width, that
 * head is a large share of the step.
 *
 * The edit slices the head's hidden-state input to h[:, -N:, :] (Slice on the sequence axis)
 * and declares the logits output's sequence axis unknown. Each position's logits depend only on
 * its own hidden state, so the rows kept are the rows the whole product would have held. It
 * applies where the graph's `logits` is made by a MatMul (or ONNX Runtime's MatMulNBits, a 4-bit
 * head) through per-element ops only: Identity, Cast, Tanh, and Add/Sub/Mul/Div by a constant
 * (a bias, a soft cap).
 */

export const NUM_LOGITS_TO_KEEP = 'num_logits_to_keep'

export type LastLogitsMatch =
  /** The graph takes num_logits_to_keep itself. */
  | { kind: 'declared' }
  | { kind: 'edit'; head: NodeInfo; hidden: string }
  | { kind: 'keep'; why: string }

const ELEMENTWISE = new Set(['Identity', 'Cast', 'Tanh'])
const BY_CONSTANT = new Set(['Add', 'Sub', 'Mul', 'Div'])
/** Slice with its bounds as inputs (opset 10) is the newest op the edit adds. */
const MIN_OPSET = 10
const isDefaultDomain = (n: NodeInfo): boolean => n.domain === '' || n.domain === 'ai.onnx'
const isHead = (n: NodeInfo): boolean => (n.opType === 'MatMul' && isDefaultDomain(n)) || (n.opType === 'MatMulNBits' && n.domain === 'com.microsoft')

/** Names of the values the edit adds. */
const ADDED = {
  negated: 'zerolayer/logits/neg_keep',
  one: 'zerolayer/logits/one',
  starts: 'zerolayer/logits/starts',
  ends: 'zerolayer/logits/ends',
  hidden: 'zerolayer/logits/kept_hidden',
} as const

export function matchLastLogits(index: GraphIndex): LastLogitsMatch {
  const keep = (why: string): LastLogitsMatch => ({ kind: 'keep', why })
  if (index.inputs.some((i) => i.name === NUM_LOGITS_TO_KEEP)) return { kind: 'declared' }
  if (index.graphFields !== 1) return keep(`the file has ${index.graphFields} graph fields`)
  if (index.opset === undefined || index.opset < MIN_OPSET) return keep(`the model imports opset ${index.opset ?? 'none'} (the edit's Slice needs ${MIN_OPSET})`)
  const logits = index.outputs.find((o) => o.name === 'logits')
  if (!logits) return keep('the graph has no logits output')
  if (logits.dims !== undefined && logits.dims.length !== 3) return keep('logits is not declared as [batch, sequence, vocabulary]')
  const producer = new Map<string, NodeInfo>()
  for (const n of index.nodes) for (const o of n.outputs) producer.set(o, n)
  const constant = (name: string): boolean => index.initializers.has(name) || producer.get(name)?.opType === 'Constant'
  let node = producer.get('logits')
  // Bounded by the node count: a malformed graph with a cycle must not hang the load.
  for (let hops = index.nodes.length; node && !isHead(node) && hops > 0; hops--) {
    if (!isDefaultDomain(node)) return keep(`logits is made through ${node.domain}:${node.opType}`)
    if (ELEMENTWISE.has(node.opType)) node = producer.get(node.inputs[0]!)
    else if (BY_CONSTANT.has(node.opType) && node.inputs.length === 2 && constant(node.inputs[1]!)) node = producer.get(node.inputs[0]!)
    else if (BY_CONSTANT.has(node.opType) && node.inputs.length === 2 && constant(node.inputs[0]!)) node = producer.get(node.inputs[1]!)
    else return keep(`logits is made through ${node.opType}, not a per-element op after the LM head's MatMul`)
  }
  if (!node || !isHead(node)) return keep('no MatMul makes logits')
  const hidden = node.inputs[0]!
  if (constant(hidden)) return keep("the LM head's first input is a constant, not the hidden states")
  const defined = definedNames(index)
  const taken = [NUM_LOGITS_TO_KEEP, ...Object.values(ADDED)].find((n) => defined.has(n))
  if (taken) return keep(`the graph already defines a value named ${taken}`)
  return { kind: 'edit', head: node, hidden }
}

/**
 * The edit as records: the num_logits_to_keep input; nodes for starts = [-N] and the Slice; the
 * head's node with the sliced value as its first input (every other byte of it the file's); the
 * logits output with its sequence axis unknown.
 */
export function lastLogitsEdit(file: FileReader, index: GraphIndex, m: Extract<LastLogitsMatch, { kind: 'edit' }>): GraphEdit {
  const edit = noEdit()
  edit.replace.set(m.head.record.tagStart, withFirstInput(file, m.head, ADDED.hidden))
  const logits = index.outputs.find((o) => o.name === 'logits')!
  if (logits.elemType !== undefined) {
    const d = logits.dims
    edit.replace.set(logits.recordStart, valueInfoRecord(GRAPH_FIELD.output, 'logits', logits.elemType, d ? [d[0], undefined, d[2]] : undefined))
  }
  edit.append.push(
    valueInfoRecord(GRAPH_FIELD.input, NUM_LOGITS_TO_KEEP, INT64, []),
    nodeRecord('Neg', [NUM_LOGITS_TO_KEEP], ADDED.negated),
    nodeRecord('Constant', [], ADDED.one, { value: { int64s: [1n] } }),
    // Reshape, not Unsqueeze, turns the scalar into [1]: Unsqueeze moved its axes to an input at opset 13.
    nodeRecord('Reshape', [ADDED.negated, ADDED.one], ADDED.starts),
    nodeRecord('Constant', [], ADDED.ends, { value: { int64s: [0x7fffffffffffffffn] } }),
    nodeRecord('Slice', [m.hidden, ADDED.starts, ADDED.ends, ADDED.one], ADDED.hidden),
  )
  return edit
}

/** The node's record with its first input renamed; its other fields copied as they are. */
function withFirstInput(file: FileReader, node: NodeInfo, input: string): Uint8Array {
  const parts: Uint8Array[] = []
  let first = true
  forEachField(file, node.record.start, node.record.end, (f) => {
    if (f.field === 1 && f.wire === 2 && first) {
      first = false
      parts.push(stringField(1, input))
    } else parts.push(file.bytes(f.tagStart, f.end))
  })
  return bytesField(GRAPH_FIELD.node, concat(parts))
}

/** Whether the session computes logits only for the positions a step samples, and why (start-up log). */
export interface LogitsPath {
  lastOnly: boolean
  /** The graph was edited at load to get there. */
  edited: boolean
  why: string
}

export function chooseLogitsPath(index: GraphIndex, enabled: boolean): { logitsPath: LogitsPath; edit?: Extract<LastLogitsMatch, { kind: 'edit' }> } {
  const m = matchLastLogits(index)
  if (m.kind === 'declared') return { logitsPath: { lastOnly: true, edited: false, why: `the graph takes ${NUM_LOGITS_TO_KEEP}` } }
  if (m.kind === 'keep') return { logitsPath: { lastOnly: false, edited: false, why: m.why } }
  if (!enabled) return { logitsPath: { lastOnly: false, edited: false, why: 'the last-logits edit applies but is switched off' } }
  return { logitsPath: { lastOnly: true, edited: true, why: `edited at load: ${NUM_LOGITS_TO_KEEP} slices the LM head's input (${m.head.opType}) to the positions sampled` }, edit: m }
}
