/**
 * The few protobuf encodings slot-kv-edit.ts writes: small messages (a graph output's
 * ValueInfoProto, an Identity or Cast node) and a field's tag and length. Everything else an
 * edit keeps is copied from the file byte for byte.
 */

const textEncoder = new TextEncoder()

export function varint(value: number | bigint): Uint8Array {
  let v = BigInt.asUintN(64, BigInt(value))
  const out: number[] = []
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80)
    v >>= 7n
  }
  out.push(Number(v))
  return Uint8Array.from(out)
}

/** A varint field (wire type 0); int64 negatives as 64-bit two's complement, as protobuf requires. */
export function intField(field: number, value: number | bigint): Uint8Array {
  return concat([varint(field << 3), varint(value)])
}

/** The tag and length of a length-delimited field (wire type 2) of `length` bytes. */
export function lengthPrefix(field: number, length: number): Uint8Array {
  return concat([varint((field << 3) | 2), varint(length)])
}

/** A length-delimited field holding `payload` (an embedded message or bytes). */
export function bytesField(field: number, payload: Uint8Array): Uint8Array {
  return concat([lengthPrefix(field, payload.byteLength), payload])
}

export function stringField(field: number, value: string): Uint8Array {
  return bytesField(field, textEncoder.encode(value))
}

export function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.byteLength
  }
  return out
}
