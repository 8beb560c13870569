import type { Dim, GraphIndex } from './onnx-graph-index.ts'
import type { FileReader } from './proto-file.ts'
import { bytesField, concat, intField, lengthPrefix, stringField } from './proto-encode.ts'

/**
 * A load-time edit of an ONNX graph (slot-kv-edit.ts, last-logits-edit.ts), as the bytes that
 * change: graph field records replaced in place (keyed by their first byte in the file) and graph
 * field records appended (nodes, inputs). Every other byte is the file's, copied once.
 */
export interface GraphEdit {
  replace: Map<number, Uint8Array>
  append: Uint8Array[]
}

export const noEdit = (): GraphEdit => ({ replace: new Map(), append: [] })

/** Several edits as one; they must not replace the same record. */
export function joinEdits(edits: readonly GraphEdit[]): GraphEdit {
  const out = noEdit()
  for (const e of edits) {
    for (const [at, bytes] of e.replace) {
      if (out.replace.has(at)) throw new Error(`two graph edits replace the record at byte ${at}`)
      out.replace.set(at, bytes)
    }
    out.append.push(...e.append)
  }
  return out
}

export const isEmptyEdit = (e: GraphEdit): boolean => e.replace.size === 0 && e.append.length === 0

/** Bytes of the file, or new bytes. */
type Piece = { from: number; to: number } | Uint8Array

/**
 * The model with the edit applied. Every byte is the file's except the graph field's length and
 * the edit's records; the weights are copied straight from the file into the one buffer returned
 * (read once; never held twice).
 */
export function editedModelBytes(file: FileReader, index: GraphIndex, edit: GraphEdit): Buffer {
  const graph: Piece[] = []
  for (const r of index.graphFieldRecords) graph.push(edit.replace.get(r.tagStart) ?? { from: r.tagStart, to: r.end })
  graph.push(...edit.append)
  const graphLength = graph.reduce((n, p) => n + pieceLength(p), 0)
  const { tagStart, end } = index.graphRecord
  const pieces = merged([{ from: 0, to: tagStart }, lengthPrefix(MODEL_GRAPH, graphLength), ...graph, { from: end, to: index.size }])
  const out = Buffer.allocUnsafe(pieces.reduce((n, p) => n + pieceLength(p), 0))
  let at = 0
  for (const p of pieces) {
    if (p instanceof Uint8Array) out.set(p, at)
    else file.readInto(out, at, p.from, p.to)
    at += pieceLength(p)
  }
  return out
}

const MODEL_GRAPH = 7
/** GraphProto fields an edit writes. */
export const GRAPH_FIELD = { node: 1, input: 11, output: 12 } as const
/** TensorProto.DataType values used here. */
export const INT64 = 7
/** AttributeProto.AttributeType values used here. */
const ATTRIBUTE = { int: 2, tensor: 4 } as const

const pieceLength = (p: Piece): number => (p instanceof Uint8Array ? p.byteLength : p.to - p.from)

/** Adjacent file ranges joined, so the copy is a few large reads. */
function merged(pieces: Piece[]): Piece[] {
  const out: Piece[] = []
  for (const p of pieces) {
    const last = out[out.length - 1]
    if (!(p instanceof Uint8Array) && last && !(last instanceof Uint8Array) && last.to === p.from) last.to = p.to
    else out.push(p instanceof Uint8Array ? p : { ...p })
  }
  return out
}

/**
 * A graph input or output record: ValueInfoProto { name 1, type 2: TypeProto { tensor_type 1:
 * { elem_type 1, shape 2 } } }. `dims` undefined: no shape declared; [] a scalar.
 */
export function valueInfoRecord(field: number, name: string, elemType: number, dims?: readonly Dim[]): Uint8Array {
  const tensor = [intField(1, elemType)]
  if (dims) tensor.push(bytesField(2, concat(dims.map((d) => bytesField(1, dimension(d))))))
  return bytesField(field, concat([stringField(1, name), bytesField(2, bytesField(1, concat(tensor)))]))
}

/** TensorShapeProto.Dimension { dim_value 1 | dim_param 2 }; empty: unknown. */
function dimension(d: Dim): Uint8Array {
  if (typeof d === 'number') return intField(1, d)
  if (typeof d === 'string') return stringField(2, d)
  return new Uint8Array(0)
}

export type NodeAttribute = { int: number } | { int64s: readonly bigint[] }

/**
 * A graph node record: NodeProto { input 1, output 2, name 3, op_type 4, attribute 5 }, its name
 * `zerolayer/<output>` so the edit's nodes are recognisable in a profile. An `int64s` attribute is
 * written as a 1-D int64 tensor (Constant's `value`).
 */
export function nodeRecord(opType: string, inputs: readonly string[], output: string, attributes: Record<string, NodeAttribute> = {}): Uint8Array {
  const parts = [...inputs.map((i) => stringField(1, i)), stringField(2, output), stringField(3, `zerolayer/${output}`), stringField(4, opType)]
  for (const [name, a] of Object.entries(attributes)) parts.push(bytesField(5, attribute(name, a)))
  return bytesField(GRAPH_FIELD.node, concat(parts))
}

/** AttributeProto { name 1, i 3, t 5, type 20 }; TensorProto { dims 1, data_type 2, raw_data 9 }. */
function attribute(name: string, a: NodeAttribute): Uint8Array {
  if ('int' in a) return concat([stringField(1, name), intField(3, a.int), intField(20, ATTRIBUTE.int)])
  const raw = new Uint8Array(8 * a.int64s.length)
  const view = new DataView(raw.buffer)
  a.int64s.forEach((v, i) => view.setBigInt64(8 * i, v, true))
  const tensor = concat([intField(1, a.int64s.length), intField(2, INT64), bytesField(9, raw)])
  return concat([stringField(1, name), bytesField(5, tensor), intField(20, ATTRIBUTE.tensor)])
}
