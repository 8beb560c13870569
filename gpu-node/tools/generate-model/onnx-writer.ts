/**
 * Minimal ONNX encoder: the subset of onnx.proto (ModelProto, GraphProto, NodeProto,
 * TensorProto with raw_data or external data, ValueInfoProto, AttributeProto,
 * OperatorSetIdProto) that a decoder-only transformer needs. Field numbers follow
 * onnx/onnx.proto; repeated scalars are written unpacked, as proto2 encoders do.
 */

import { endianness } from 'node:os'
import { layoutExternalData, writeExternalData, type ExternalPlacement } from './external-data.ts'
import { ProtoMessage } from './proto-wire.ts'

/** TensorProto.DataType values used here. */
export const DataType = { FLOAT: 1, INT64: 7, BOOL: 9 } as const
export type ElemType = 'float32' | 'int64' | 'bool'

const ELEM_TYPE_CODE: Record<ElemType, number> = { float32: DataType.FLOAT, int64: DataType.INT64, bool: DataType.BOOL }

export interface OnnxTensor {
  name: string
  elemType: 'float32' | 'int64'
  dims: number[]
  data: Float32Array | BigInt64Array
}

/** One attribute value; the key says its AttributeProto type. */
export type OnnxAttribute = { int: number } | { float: number } | { ints: number[] } | { floats: number[] } | { string: string } | { tensor: OnnxTensor }

export interface OnnxNode {
  opType: string
  name: string
  inputs: string[]
  outputs: string[]
  attributes?: Record<string, OnnxAttribute>
}

/** A graph input/output: a dimension is a fixed size (number) or a symbolic name (string). */
export interface OnnxValueInfo {
  name: string
  elemType: ElemType
  shape: Array<number | string>
}

export interface OnnxGraph {
  name: string
  nodes: OnnxNode[]
  initializers: OnnxTensor[]
  inputs: OnnxValueInfo[]
  outputs: OnnxValueInfo[]
}

export interface OnnxModel {
  irVersion: number
  /** Default-domain (ai.onnx) opset. */
  opsetVersion: number
  producerName: string
  producerVersion: string
  graph: OnnxGraph
  metadata?: Record<string, string>
}

/** Initializer bytes in a file beside model.onnx (external-data.ts). */
export interface ExternalDataFile {
  /** The file name model.onnx records, relative to its directory (e.g. `model.onnx_data`). */
  location: string
  /** Where to write the file now (the caller may rename it to `location` afterwards). */
  path: string
}

export interface WrittenModel {
  /** model.onnx size in bytes. */
  modelBytes: number
  /** The external data file's size in bytes; 0 without one. */
  externalDataBytes: number
}

const AttributeType = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, FLOATS: 6, INTS: 7 } as const
/** TensorProto.DataLocation.EXTERNAL. */
const DATA_LOCATION_EXTERNAL = 1

/** Where an external tensor's bytes are: `location` relative to the model file. */
type ExternalRef = ExternalPlacement & { location: string }
type PlaceTensor = (t: OnnxTensor) => ExternalRef | undefined
const allInline: PlaceTensor = () => undefined

/** The tensor's bytes as raw_data stores them: little-endian by spec, so big-endian hosts are refused. */
function tensorBytes(t: OnnxTensor): Uint8Array {
  if (endianness() !== 'LE') throw new Error('ONNX raw_data needs a little-endian host')
  return new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)
}

/** StringStringEntryProto (external_data entries, metadata_props). */
const stringEntry = (key: string, value: string): ProtoMessage => new ProtoMessage().string(1, key).string(2, value)

function encodeTensor(t: OnnxTensor, external?: ExternalRef): ProtoMessage {
  const m = new ProtoMessage()
  for (const d of t.dims) m.int(1, d)
  m.uint(2, ELEM_TYPE_CODE[t.elemType])
  m.string(8, t.name)
  if (external === undefined) return m.bytes(9, tensorBytes(t))
  m.message(13, stringEntry('location', external.location))
  m.message(13, stringEntry('offset', String(external.offset)))
  m.message(13, stringEntry('length', String(external.length)))
  return m.uint(14, DATA_LOCATION_EXTERNAL)
}

function encodeAttribute(name: string, a: OnnxAttribute): ProtoMessage {
  const m = new ProtoMessage().string(1, name)
  if ('int' in a) m.int(3, a.int).uint(20, AttributeType.INT)
  else if ('float' in a) m.float(2, a.float).uint(20, AttributeType.FLOAT)
  else if ('ints' in a) {
    for (const v of a.ints) m.int(8, v)
    m.uint(20, AttributeType.INTS)
  } else if ('floats' in a) {
    for (const v of a.floats) m.float(7, v)
    m.uint(20, AttributeType.FLOATS)
  } else if ('string' in a) m.string(4, a.string).uint(20, AttributeType.STRING)
  else m.message(5, encodeTensor(a.tensor)).uint(20, AttributeType.TENSOR)
  return m
}

function encodeNode(n: OnnxNode): ProtoMessage {
  const m = new ProtoMessage()
  for (const i of n.inputs) m.string(1, i)
  for (const o of n.outputs) m.string(2, o)
  m.string(3, n.name).string(4, n.opType)
  for (const [k, v] of Object.entries(n.attributes ?? {})) m.message(5, encodeAttribute(k, v))
  return m
}

function encodeValueInfo(v: OnnxValueInfo): ProtoMessage {
  const shape = new ProtoMessage()
  for (const d of v.shape) {
    const dim = new ProtoMessage()
    if (typeof d === 'number') dim.int(1, d)
    else dim.string(2, d)
    shape.message(1, dim)
  }
  const tensorType = new ProtoMessage().uint(1, ELEM_TYPE_CODE[v.elemType]).message(2, shape)
  const type = new ProtoMessage().message(1, tensorType)
  return new ProtoMessage().string(1, v.name).message(2, type)
}

function encodeGraph(g: OnnxGraph, place: PlaceTensor): ProtoMessage {
  const m = new ProtoMessage()
  for (const n of g.nodes) m.message(1, encodeNode(n))
  m.string(2, g.name)
  for (const t of g.initializers) m.message(5, encodeTensor(t, place(t)))
  for (const v of g.inputs) m.message(11, encodeValueInfo(v))
  for (const v of g.outputs) m.message(12, encodeValueInfo(v))
  return m
}

/** Encodes `model`; `place` says which initializers are external data (default: none). */
export function encodeModel(model: OnnxModel, place: PlaceTensor = allInline): ProtoMessage {
  const m = new ProtoMessage().int(1, model.irVersion).string(2, model.producerName).string(3, model.producerVersion)
  m.message(7, encodeGraph(model.graph, place))
  m.message(8, new ProtoMessage().string(1, '').int(2, model.opsetVersion))
  for (const [key, value] of Object.entries(model.metadata ?? {})) m.message(14, stringEntry(key, value))
  return m
}

/**
 * Encodes `model` and streams it to `path`. With `external`, the initializers external-data.ts
 * places are written to `external.path` first and model.onnx only refers to them.
 */
export function writeOnnxModel(path: string, model: OnnxModel, external?: ExternalDataFile): WrittenModel {
  if (external === undefined) return { modelBytes: encodeModel(model).writeToFile(path), externalDataBytes: 0 }
  const tensors = model.graph.initializers
  const placements = layoutExternalData(tensors.map((t) => t.data.byteLength))
  const refs = new Map<OnnxTensor, ExternalRef>()
  tensors.forEach((t, i) => {
    const at = placements[i]
    if (at !== undefined) refs.set(t, { ...at, location: external.location })
  })
  const externalDataBytes = writeExternalData(external.path, [...refs].map(([t, at]) => ({ at, bytes: tensorBytes(t) })))
  return { modelBytes: encodeModel(model, (t) => refs.get(t)).writeToFile(path), externalDataBytes }
}
