import { closeSync, openSync, readSync } from 'node:fs'

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
  const fd = openSync(path, 'r')
  try {
    const file = new FileReader(fd)
    const ops = new Set<string>()
    forEachField(file, 0, Infinity, (field, start, end) => {
      if (field === 7) readGraph(file, start, end, ops)
    })
    return ops
  } finally {
    closeSync(fd)
  }
}

function readGraph(file: FileReader, start: number, end: number, ops: Set<string>): void {
  forEachField(file, start, end, (field, s, e) => {
    if (field === 1) readNode(file, s, e, ops)
  })
}

function readNode(file: FileReader, start: number, end: number, ops: Set<string>): void {
  forEachField(file, start, end, (field, s, e) => {
    if (field === 4) ops.add(file.text(s, e))
    else if (field === 5) {
      forEachField(file, s, e, (f, gs, ge) => {
        if (f === 6 || f === 11) readGraph(file, gs, ge, ops)
      })
    }
  })
}

/** Calls `visit` for each length-delimited field in [start, end); other wire types are skipped. */
function forEachField(file: FileReader, start: number, end: number, visit: (field: number, start: number, end: number) => void): void {
  let at = start
  while (at < end) {
    const tag = file.varint(at)
    if (tag === undefined) return // end of file
    at = tag.next
    const field = Number(tag.value >> 3n)
    const wire = Number(tag.value & 7n)
    if (wire === 0) at = file.varint(at)!.next
    else if (wire === 1) at += 8
    else if (wire === 5) at += 4
    else if (wire === 2) {
      const len = file.varint(at)!
      const s = len.next
      const e = s + Number(len.value)
      visit(field, s, e)
      at = e
    } else throw new Error(`not an ONNX protobuf (wire type ${wire} at byte ${at})`)
  }
}

/** Positional reads through a small window, so skipped fields are never read. */
class FileReader {
  private window = Buffer.alloc(0)
  private windowAt = 0

  constructor(private readonly fd: number) {}

  varint(at: number): { value: bigint; next: number } | undefined {
    let value = 0n
    for (let i = 0; i < 10; i++) {
      const byte = this.byte(at + i)
      if (byte === undefined) return undefined
      value |= BigInt(byte & 0x7f) << BigInt(7 * i)
      if ((byte & 0x80) === 0) return { value, next: at + i + 1 }
    }
    throw new Error(`not an ONNX protobuf (varint at byte ${at})`)
  }

  text(start: number, end: number): string {
    const out = Buffer.alloc(end - start)
    readSync(this.fd, out, 0, out.length, start)
    return out.toString('utf8')
  }

  private byte(at: number): number | undefined {
    if (at < this.windowAt || at >= this.windowAt + this.window.length) {
      this.window = Buffer.alloc(64 * 1024)
      const n = readSync(this.fd, this.window, 0, this.window.length, at)
      this.window = this.window.subarray(0, n)
      this.windowAt = at
      if (n === 0) return undefined
    }
    return this.window[at - this.windowAt]
  }
}
