import { describe, expect, it } from 'vitest'
import { IncrementalDetokenizer, type TokenDecoder } from './detokenizer.ts'

/** Byte-level tokens: id = one UTF-8 byte, decoded as a real tokenizer does (invalid → U+FFFD). */
const bytes: TokenDecoder = { decode: (ids) => new TextDecoder().decode(Uint8Array.from(ids)) }

describe('IncrementalDetokenizer', () => {
  it('holds a split multi-byte character until it is complete', () => {
    const d = new IncrementalDetokenizer(bytes)
    const ids = [...new TextEncoder().encode('a€😀b')]
    const pieces = ids.map((t) => d.push(t))
    expect(pieces.join('')).toBe('a€😀b')
    expect(pieces.every((p) => !p.includes('\uFFFD'))).toBe(true)
    expect(pieces.filter((p) => p !== '').length).toBe(4)
  })

  it('flushes a dangling partial character at the end', () => {
    const d = new IncrementalDetokenizer(bytes)
    expect(d.push(0xe2)).toBe('')
    expect(d.flush()).toBe('\uFFFD')
  })
})
