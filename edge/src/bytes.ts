/** The chunks joined into one new array; its `.buffer` holds exactly these bytes. */
export function concatBytes(chunks: readonly Uint8Array[], total = chunks.reduce((n, c) => n + c.byteLength, 0)): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(total)
  let offset = 0
  for (const chunk of chunks) {
    out.set(chunk, offset)
    offset += chunk.byteLength
  }
  return out
}
