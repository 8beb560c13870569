import { closeSync, fstatSync, openSync, readSync } from 'node:fs'

/**
 * Reading a protobuf (an ONNX file) in place: fields are visited by their byte ranges and only
 * what a caller asks for is read, so a multi-gigabyte file's weights are skipped by their length,
 * never loaded. graph-ops.ts and onnx-graph-index.ts read ONNX files this way.
 */

/** One field of a message: where its record begins (the tag) and ends, and its payload. */
export interface ProtoField {
  field: number
  /** 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. */
  wire: number
  /** The record's first byte (its tag): a record is copied as [tagStart, end). */
  tagStart: number
  /** The payload: a length-delimited field's bytes, a fixed field's bytes, a varint's bytes. */
  start: number
  end: number
  /** A varint's value (wire 0). */
  value?: bigint
}

/** Calls `visit` for each field in [start, end) (an `end` past the file stops at its end). */
export function forEachField(file: FileReader, start: number, end: number, visit: (f: ProtoField) => void): void {
  let at = start
  while (at < end) {
    const tag = file.varint(at)
    if (tag === undefined) return // end of file
    const tagStart = at
    at = tag.next
    const field = Number(tag.value >> 3n)
    const wire = Number(tag.value & 7n)
    if (wire === 0) {
      const v = file.varint(at)
      if (v === undefined) throw new Error(`not an ONNX protobuf (truncated varint at byte ${at})`)
      visit({ field, wire, tagStart, start: at, end: v.next, value: v.value })
      at = v.next
    } else if (wire === 1 || wire === 5) {
      const e = at + (wire === 1 ? 8 : 4)
      visit({ field, wire, tagStart, start: at, end: e })
      at = e
    } else if (wire === 2) {
      const len = file.varint(at)
      if (len === undefined) throw new Error(`not an ONNX protobuf (truncated length at byte ${at})`)
      const s = len.next
      const e = s + Number(len.value)
      if (e > Math.min(end, file.size)) throw new Error(`not an ONNX protobuf (field ${field} at byte ${tagStart} runs past its message)`)
      visit({ field, wire, tagStart, start: s, end: e })
      at = e
    } else throw new Error(`not an ONNX protobuf (wire type ${wire} at byte ${tagStart})`)
  }
}

const READ_CHUNK_BYTES = 1 << 30

/** `fn` with a reader over the file at `path`, closed after (also when `fn` throws). */
export function withFileReader<T>(path: string, fn: (file: FileReader) => T): T {
  const fd = openSync(path, 'r')
  try {
    return fn(new FileReader(fd, fstatSync(fd).size))
  } finally {
    closeSync(fd)
  }
}

/** Positional reads through a small window, so skipped fields are never read. */
export class FileReader {
  private window = Buffer.alloc(0)
  private windowAt = 0

  constructor(
    private readonly fd: number,
    /** The file's size: fields may not run past it. */
    readonly size = Infinity,
  ) {}

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
    return this.bytes(start, end).toString('utf8')
  }

  bytes(start: number, end: number): Buffer {
    const out = Buffer.alloc(end - start)
    const n = readSync(this.fd, out, 0, out.length, start)
    if (n !== out.length) throw new Error(`not an ONNX protobuf (bytes ${start}–${end} run past the end of the file)`)
    return out
  }

  /** Copies the file's bytes [start, end) into `target` at `at` (in chunks: one read may not pass 2 GiB). */
  readInto(target: Uint8Array, at: number, start: number, end: number): void {
    for (let pos = start; pos < end; ) {
      const n = readSync(this.fd, target, at + (pos - start), Math.min(end - pos, READ_CHUNK_BYTES), pos)
      if (n === 0) throw new Error(`not an ONNX protobuf (bytes ${start}–${end} run past the end of the file)`)
      pos += n
    }
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
