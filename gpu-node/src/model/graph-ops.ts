import { forEachField, withFileReader, type FileReader } from './proto-file.ts'

/**
 * Operators whose numbers for one row depend on the other rows of the batch: dynamic activation
 * quantization (onnx-community's `model_quantized.onnx`, ORT's quantize_dynamic) takes one scale
 * over the whole input tensor, so a row's tokens would change with its batch. Such a graph runs
 * one sequence at a time (runner.ts Batching 'alone').
 */
const BATCH_COUPLING_OPS = ['DynamicQuantizeLinear', 'DynamicQuantizeMatMul']

/** The batch-coupling operators the ONNX file at `path` uses. */
export function batchCouplingOps(path: string): string[] {
  const ops = readGraphOps(path)
  return BATCH_COUPLING_OPS.filter((op) => ops.has(op))
}

/**
 * The operator types an ONNX file's graph uses, subgraphs included (a merged decoder's `If`
 * branches), read straight from the protobuf: only node records are read, every other field
 * (the weights above all) is skipped by its length, so a multi-gigabyte file costs a few reads.
 * Field numbers (onnx.proto): ModelProto.graph 7; GraphProto.node 1; NodeProto.op_type 4,
 * attribute 5; AttributeProto.g 6, graphs 11.
 */
export function readGraphOps(path: string): Set<string> {
  return withFileReader(path, (file) => {
    const ops = new Set<string>()
    forEachField(file, 0, file.size, ({ field, wire, start, end }) => {
      if (field === 7 && wire === 2) readGraph(file, start, end, ops)
    })
    return ops
  })
}

function readGraph(file: FileReader, start: number, end: number, ops: Set<string>): void {
  forEachField(file, start, end, ({ field, wire, start: s, end: e }) => {
    if (field === 1 && wire === 2) readNode(file, s, e, ops)
  })
}

function readNode(file: FileReader, start: number, end: number, ops: Set<string>): void {
  forEachField(file, start, end, ({ field, wire, start: s, end: e }) => {
    if (wire !== 2) return
    if (field === 4) ops.add(file.text(s, e))
    else if (field === 5) {
      forEachField(file, s, e, (a) => {
        if ((a.field === 6 || a.field === 11) && a.wire === 2) readGraph(file, a.start, a.end, ops)
      })
    }
  })
}
