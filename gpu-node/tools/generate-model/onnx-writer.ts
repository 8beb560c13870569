/**
 * Minimal ONNX encoder: the subset of onnx.proto (ModelProto, GraphProto, NodeProto,
 * TensorProto with raw_data, ValueInfoProto, AttributeProto, OperatorSetIdProto) that a
 * decoder-only transformer needs. Field numbers follow onnx/onnx.proto; repeated scalars are
 * written unpacked, as proto2 encoders do.
 */

import { endianness } from 'node:os'
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

const AttributeType = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, FLOATS: 6, INTS: 7 } as const

function encodeTensor(t: OnnxTensor): ProtoMessage {
  const m = new ProtoMessage()
  for (const d of t.dims) m.int(1, d)
  m.uint(2, ELEM_TYPE_CODE[t.elemType])
  m.string(8, t.name)
  // raw_data is little-endian by spec; typed arrays use host order, so refuse big-endian hosts.
  if (endianness() !== 'LE') throw new Error('ONNX raw_data needs a little-endian host')
  m.bytes(9, new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength))
  return m
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

function encodeGraph(g: OnnxGraph): ProtoMessage {
  const m = new ProtoMessage()
  for (const n of g.nodes) m.message(1, encodeNode(n))
  m.string(2, g.name)
  for (const t of g.initializers) m.message(5, encodeTensor(t))
  for (const v of g.inputs) m.message(11, encodeValueInfo(v))
  for (const v of g.outputs) m.message(12, encodeValueInfo(v))
  return m
}

export function encodeModel(model: OnnxModel): ProtoMessage {
  const m = new ProtoMessage().int(1, model.irVersion).string(2, model.producerName).string(3, model.producerVersion)
  m.message(7, encodeGraph(model.graph))
  m.message(8, new ProtoMessage().string(1, '').int(2, model.opsetVersion))
  for (const [key, value] of Object.entries(model.metadata ?? {})) m.message(14, new ProtoMessage().string(1, key).string(2, value))
  return m
}

/** Encodes `model` and streams it to `path`; returns the file size in bytes. */
export function writeOnnxModel(path: string, model: OnnxModel): number {
  return encodeModel(model).writeToFile(path)
}
