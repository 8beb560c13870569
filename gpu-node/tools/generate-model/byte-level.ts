/**
 * GPT-2's byte-to-unicode table: every byte gets a printable character, so byte-level BPE tokens
 * are plain strings (space -> 'Ġ', newline -> 'Ċ'). Token ids 0..255 follow this table's order,
 * as in GPT-2's own vocabulary.
 */

/** Bytes in vocabulary order: printable Latin-1 first, then the rest remapped above U+0100. */
export const BYTE_ORDER: readonly number[] = (() => {
  const printable: number[] = []
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b)
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b)
  for (let b = 0xae; b <= 0xff; b++) printable.push(b)
  const rest: number[] = []
  for (let b = 0; b < 256; b++) if (!printable.includes(b)) rest.push(b)
  return [...printable, ...rest]
})()

/** byte -> its character in byte-level token strings. */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const table = new Array<string>(256)
  let next = 0
  for (const b of BYTE_ORDER) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
    table[b] = String.fromCharCode(printable ? b : 256 + next++)
  }
  return table
})()

const CHAR_TO_BYTE = new Map<string, number>(BYTE_TO_CHAR.map((c, b) => [c, b]))

const utf8 = new TextEncoder()

/** Text -> its byte-level string (what the ByteLevel pre-tokenizer feeds to BPE). */
export function toByteLevel(text: string): string {
  return Array.from(utf8.encode(text), (b) => BYTE_TO_CHAR[b]).join('')
}

/** Byte-level token string -> the bytes it stands for. */
export function tokenBytes(token: string): Uint8Array {
  return Uint8Array.from(Array.from(token, (c) => {
    const b = CHAR_TO_BYTE.get(c)
    if (b === undefined) throw new Error(`not a byte-level token: ${JSON.stringify(token)}`)
    return b
  }))
}
