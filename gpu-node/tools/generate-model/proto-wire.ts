/**
 * Protobuf wire-format encoder that keeps a message as a list of byte pieces. Small fields are
 * packed into shared scratch chunks; large byte payloads (weights) are referenced, never copied,
 * so a multi-hundred-MB model can be streamed to disk piece by piece.
 */

import { closeSync, openSync, writeSync } from 'node:fs'

const WIRE_VARINT = 0
const WIRE_FIXED32 = 5
const WIRE_LEN = 2

/** Payloads at least this long are kept as their own piece instead of copied into scratch. */
const REFERENCE_MIN_BYTES = 4096
const SCRATCH_BYTES = 64 * 1024

const textEncoder = new TextEncoder()

export class ProtoMessage {
  private readonly pieces: Uint8Array[] = []
  private scratch = new Uint8Array(SCRATCH_BYTES)
  private used = 0
  private start = 0
  /** Encoded size in bytes so far. */
  byteLength = 0

  /** Non-negative integer or enum as a varint. */
  uint(field: number, value: number): this {
    this.tag(field, WIRE_VARINT)
    this.varint(BigInt(value))
    return this
  }

  /** int64 / int32 field: negatives are two's-complement 64-bit varints (10 bytes), as protobuf requires. */
  int(field: number, value: number): this {
    this.tag(field, WIRE_VARINT)
    this.varint(BigInt.asUintN(64, BigInt(value)))
    return this
  }

  float(field: number, value: number): this {
    this.tag(field, WIRE_FIXED32)
    const b = new Uint8Array(4)
    new DataView(b.buffer).setFloat32(0, value, true)
    this.raw(b)
    return this
  }

  string(field: number, value: string): this {
    return this.bytes(field, textEncoder.encode(value))
  }

  /** Length-delimited bytes; large payloads are referenced, so the caller must not mutate them afterwards. */
  bytes(field: number, value: Uint8Array): this {
    this.tag(field, WIRE_LEN)
    this.varint(BigInt(value.byteLength))
    if (value.byteLength >= REFERENCE_MIN_BYTES) this.reference(value)
    else this.raw(value)
    return this
  }

  /** Embedded message: its pieces are appended (small ones copied, large ones referenced). */
  message(field: number, sub: ProtoMessage): this {
    this.tag(field, WIRE_LEN)
    this.varint(BigInt(sub.byteLength))
    for (const piece of sub.finish()) {
      if (piece.byteLength >= REFERENCE_MIN_BYTES) this.reference(piece)
      else this.raw(piece)
    }
    return this
  }

  /** The encoded message as pieces, in order. Their total length is `byteLength`. */
  finish(): Uint8Array[] {
    this.flushScratch()
    return this.pieces
  }

  /** Writes the message to `path` with a sequence of writeSync calls; returns bytes written. */
  writeToFile(path: string): number {
    return writePieces(path, this.finish())
  }

  private tag(field: number, wireType: number): void {
    this.varint(BigInt((field << 3) | wireType))
  }

  private varint(value: bigint): void {
    const b: number[] = []
    let v = value
    while (v >= 0x80n) {
      b.push(Number(v & 0x7fn) | 0x80)
      v >>= 7n
    }
    b.push(Number(v))
    this.raw(Uint8Array.from(b))
  }

  private raw(bytes: Uint8Array): void {
    if (this.used + bytes.byteLength > this.scratch.byteLength) {
      this.flushScratch()
      this.scratch = new Uint8Array(Math.max(SCRATCH_BYTES, bytes.byteLength))
      this.used = 0
      this.start = 0
    }
    this.scratch.set(bytes, this.used)
    this.used += bytes.byteLength
    this.byteLength += bytes.byteLength
  }

  private reference(bytes: Uint8Array): void {
    this.flushScratch()
    this.pieces.push(bytes)
    this.byteLength += bytes.byteLength
  }

  /** Moves the scratch bytes written since the last flush into `pieces`; scratch space after them stays usable. */
  private flushScratch(): void {
    if (this.used > this.start) this.pieces.push(this.scratch.subarray(this.start, this.used))
    this.start = this.used
  }
}

/** Writes `pieces` to `path` in order, one writeSync loop each (nothing is concatenated); returns bytes written. */
export function writePieces(path: string, pieces: Iterable<Uint8Array>): number {
  const fd = openSync(path, 'w')
  let total = 0
  try {
    for (const piece of pieces) {
      let off = 0
      while (off < piece.byteLength) off += writeSync(fd, piece, off, piece.byteLength - off)
      total += off
    }
  } finally {
    closeSync(fd)
  }
  return total
}
