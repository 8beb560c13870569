import { FileReader, forEachField, type ProtoField } from './proto-file.ts'

/**
 * What slot-kv-edit.ts needs to know of an ONNX file's top-level graph, and where each part lies
 * in the file, read without loading the weights (proto-file.ts): the nodes' wiring (op type,
 * inputs, outputs, integer attributes), the graph inputs' and outputs' types, the initializers'
 * names. Subgraphs (a merged decoder's `If` branches) are not indexed: the edit never applies to
 * them. Field numbers are onnx.proto's.
 */

/** ModelProto.graph, ModelProto.opset_import; OperatorSetIdProto's fields. */
const MODEL_GRAPH = 7
const MODEL_OPSET_IMPORT = 8
const OPSET = { domain: 1, version: 2 } as const
const GRAPH = { node: 1, initializer: 5, input: 11, output: 12, valueInfo: 13 } as const
const NODE = { input: 1, output: 2, opType: 4, attribute: 5, domain: 7 } as const
const ATTRIBUTE = { name: 1, i: 3 } as const
const TENSOR_NAME = 8
const VALUE_INFO = { name: 1, type: 2 } as const
/** TypeProto.tensor_type; TypeProto.Tensor elem_type and shape; TensorShapeProto.dim; Dimension dim_value, dim_param. */
const TYPE_TENSOR = 1
const TENSOR_TYPE = { elemType: 1, shape: 2 } as const
const SHAPE_DIM = 1
const DIM = { value: 1, param: 2 } as const

export interface NodeInfo {
  opType: string
  domain: string
  inputs: string[]
  outputs: string[]
  /** The node's INT attributes (Concat's axis, Cast's to) by name; others are not read. */
  ints: Map<string, bigint>
  /** Where the node's record lies in the file (an edit rewrites a node from it). */
  record: ProtoField
}

/** One graph dimension: a number, a symbolic name, or unknown. */
export type Dim = number | string | undefined

export interface ValueInfo {
  name: string
  /** TensorProto.DataType; undefined when the type is not a tensor or not declared. */
  elemType?: number
  /** undefined when no shape is declared. */
  dims?: Dim[]
  /** The record's bytes in the file, tag included. */
  recordStart: number
  recordEnd: number
}

export interface GraphIndex {
  /** The file's size. */
  size: number
  /** The default (ai.onnx) domain's opset version the model imports; undefined when it names none. */
  opset?: number
  /** How many ModelProto.graph fields the file has (protobuf would merge several: only 1 is usual). */
  graphFields: number
  /** The graph field's record (tag included) and its payload. */
  graphRecord: { tagStart: number; start: number; end: number }
  /** The graph's fields in file order, as slot-kv-edit.ts copies them. */
  graphFieldRecords: ProtoField[]
  nodes: NodeInfo[]
  inputs: ValueInfo[]
  outputs: ValueInfo[]
  initializers: Set<string>
}

export function readGraphIndex(file: FileReader): GraphIndex {
  let graph: ProtoField | undefined
  let graphFields = 0
  let opset: number | undefined
  forEachField(file, 0, file.size, (f) => {
    if (f.field === MODEL_GRAPH && f.wire === 2) {
      graphFields++
      graph ??= f
    } else if (f.field === MODEL_OPSET_IMPORT && f.wire === 2) {
      let domain = ''
      let version: number | undefined
      forEachField(file, f.start, f.end, (o) => {
        if (o.field === OPSET.domain && o.wire === 2) domain = file.text(o.start, o.end)
        else if (o.field === OPSET.version && o.wire === 0) version = Number(o.value)
      })
      if (domain === '' || domain === 'ai.onnx') opset = version
    }
  })
  if (!graph) throw new Error('not an ONNX model (no graph)')
  const index: GraphIndex = {
    size: file.size,
    ...(opset === undefined ? {} : { opset }),
    graphFields,
    graphRecord: { tagStart: graph.tagStart, start: graph.start, end: graph.end },
    graphFieldRecords: [],
    nodes: [],
    inputs: [],
    outputs: [],
    initializers: new Set(),
  }
  forEachField(file, graph.start, graph.end, (f) => {
    index.graphFieldRecords.push(f)
    if (f.wire !== 2) return
    if (f.field === GRAPH.node) index.nodes.push(readNode(file, f))
    else if (f.field === GRAPH.input) index.inputs.push(readValueInfo(file, f))
    else if (f.field === GRAPH.output) index.outputs.push(readValueInfo(file, f))
    else if (f.field === GRAPH.initializer) {
      forEachField(file, f.start, f.end, (t) => {
        if (t.field === TENSOR_NAME && t.wire === 2) index.initializers.add(file.text(t.start, t.end))
      })
    }
  })
  return index
}

function readNode(file: FileReader, n: ProtoField): NodeInfo {
  const node: NodeInfo = { opType: '', domain: '', inputs: [], outputs: [], ints: new Map(), record: n }
  forEachField(file, n.start, n.end, (f) => {
    if (f.wire !== 2) return
    if (f.field === NODE.input) node.inputs.push(file.text(f.start, f.end))
    else if (f.field === NODE.output) node.outputs.push(file.text(f.start, f.end))
    else if (f.field === NODE.opType) node.opType = file.text(f.start, f.end)
    else if (f.field === NODE.domain) node.domain = file.text(f.start, f.end)
    else if (f.field === NODE.attribute) {
      let name = ''
      let i: bigint | undefined
      forEachField(file, f.start, f.end, (a) => {
        if (a.field === ATTRIBUTE.name && a.wire === 2) name = file.text(a.start, a.end)
        // int64, so negatives (Concat's axis -2) are 64-bit two's complement.
        else if (a.field === ATTRIBUTE.i && a.wire === 0) i = BigInt.asIntN(64, a.value!)
      })
      if (i !== undefined) node.ints.set(name, i)
    }
  })
  return node
}

function readValueInfo(file: FileReader, v: ProtoField): ValueInfo {
  const info: ValueInfo = { name: '', recordStart: v.tagStart, recordEnd: v.end }
  forEachField(file, v.start, v.end, (f) => {
    if (f.field === VALUE_INFO.name && f.wire === 2) info.name = file.text(f.start, f.end)
    else if (f.field === VALUE_INFO.type && f.wire === 2) {
      forEachField(file, f.start, f.end, (t) => {
        if (t.field === TYPE_TENSOR && t.wire === 2) readTensorType(file, t, info)
      })
    }
  })
  return info
}

function readTensorType(file: FileReader, t: ProtoField, info: ValueInfo): void {
  forEachField(file, t.start, t.end, (f) => {
    if (f.field === TENSOR_TYPE.elemType && f.wire === 0) info.elemType = Number(f.value)
    else if (f.field === TENSOR_TYPE.shape && f.wire === 2) {
      const dims: Dim[] = []
      forEachField(file, f.start, f.end, (d) => {
        if (d.field !== SHAPE_DIM || d.wire !== 2) return
        let dim: Dim
        forEachField(file, d.start, d.end, (x) => {
          if (x.field === DIM.value && x.wire === 0) dim = Number(BigInt.asIntN(64, x.value!))
          else if (x.field === DIM.param && x.wire === 2) dim = file.text(x.start, x.end)
        })
        dims.push(dim)
      })
      info.dims = dims
    }
  })
}

/** The value names the graph defines: its inputs, initializers and node outputs. */
export function definedNames(index: GraphIndex): Set<string> {
  const names = new Set<string>([...index.inputs.map((i) => i.name), ...index.initializers])
  for (const n of index.nodes) for (const o of n.outputs) names.add(o)
  return names
}
