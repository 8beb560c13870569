/**
 * The config rewrite behind the local edge's V8 flags: Config.v8Flags (pointer field 2 of the root
 * struct) set on a binary Cap'n Proto message as Miniflare writes it, the rest untouched. The
 * messages here are built by hand and read back by hand, word by word; miniflare-edge.test.ts shows
 * real workerd reading the result.
 */
import { describe, expect, it } from 'vitest'
import { v8FlagsFromEnv, withV8Flags } from './workerd-v8-flags.ts'

/** A stream-framed message from its segments' words (each a [low, high] 32-bit pair). */
function message(segments: Array<Array<[number, number]>>): Uint8Array {
  const header = 4 * (1 + segments.length) + (segments.length % 2 === 0 ? 4 : 0)
  const out = new Uint8Array(header + 8 * segments.reduce((n, s) => n + s.length, 0))
  const v = new DataView(out.buffer)
  v.setUint32(0, segments.length - 1, true)
  segments.forEach((s, i) => v.setUint32(4 * (1 + i), s.length, true))
  let at = header
  for (const s of segments) {
    for (const [lo, hi] of s) {
      v.setUint32(at, lo >>> 0, true)
      v.setUint32(at + 4, hi >>> 0, true)
      at += 8
    }
  }
  return out
}

/** Struct pointer words: offset (words after the pointer), data words, pointer count. */
const structPointer = (offset: number, dataWords: number, pointers: number): [number, number] => [(offset << 2) >>> 0, dataWords | (pointers << 16)]
const NULL: [number, number] = [0, 0]

/** Reads a message back: its segments, and the texts in the root struct's pointer field `field`. */
function read(bytes: Uint8Array, field: number): { segments: Uint8Array[]; texts: string[] | null } {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const count = v.getUint32(0, true) + 1
  let at = 4 * (1 + count) + (count % 2 === 0 ? 4 : 0)
  const segments: Uint8Array[] = []
  for (let i = 0; i < count; i++) {
    const size = v.getUint32(4 * (1 + i), true) * 8
    segments.push(bytes.subarray(at, at + size))
    at += size
  }
  expect(at).toBe(bytes.byteLength)
  const word = (seg: number, w: number) => {
    const s = new DataView(segments[seg]!.buffer, segments[seg]!.byteOffset, segments[seg]!.byteLength)
    return [s.getUint32(w * 8, true), s.getUint32(w * 8 + 4, true)] as const
  }
  let [seg, pw] = [0, 0]
  let [lo, hi] = word(0, 0)
  if ((lo & 3) === 2) {
    ;[seg, pw] = [hi, lo >>> 3]
    ;[lo, hi] = word(seg, pw)
  }
  const start = pw + 1 + ((lo | 0) >> 2)
  const slot = start + (hi & 0xffff) + field
  const [llo, lhi] = word(seg, slot)
  if (llo === 0 && lhi === 0) return { segments, texts: null }
  expect(llo & 3).toBe(1)
  expect(lhi & 7).toBe(6)
  const list = slot + 1 + ((llo | 0) >> 2)
  const texts: string[] = []
  for (let i = 0; i < lhi >>> 3; i++) {
    const [tlo, thi] = word(seg, list + i)
    expect(thi & 7).toBe(2)
    const from = (list + i + 1 + ((tlo | 0) >> 2)) * 8
    const bytesWithNul = segments[seg]!.subarray(from, from + (thi >>> 3))
    expect(bytesWithNul.at(-1)).toBe(0)
    texts.push(new TextDecoder().decode(bytesWithNul.subarray(0, -1)))
  }
  return { segments, texts }
}

describe('withV8Flags', () => {
  // Config as workerd.capnp lays it out: one data word (structuredLogging), six pointers
  // (services, sockets, v8Flags, extensions, autogates, logging).
  const config = (services: [number, number] = NULL) => [structPointer(0, 1, 6), [1, 0] as [number, number], services, NULL, NULL, NULL, NULL, NULL]

  it('sets Config.v8Flags and leaves every other field as it was', () => {
    const before = message([config()])
    const after = withV8Flags(before, ['--optimize-for-size', '--max-old-space-size=128'])
    expect(read(before, 2).texts).toBeNull()
    const { segments, texts } = read(after, 2)
    expect(texts).toEqual(['--optimize-for-size', '--max-old-space-size=128'])
    // The original words come first, unchanged but for the v8Flags pointer.
    const original = read(before, 2).segments[0]!
    expect([...segments[0]!.subarray(0, 32)]).toEqual([...original.subarray(0, 32)])
    expect([...segments[0]!.subarray(40, original.byteLength)]).toEqual([...original.subarray(40)])
    for (const other of [0, 1, 3, 4, 5]) expect(read(after, other).texts).toBeNull()
  })

  it('grows only the root struct\'s segment of a multi-segment message, and follows a far root pointer', () => {
    const other: Array<[number, number]> = [[0xabcdef01, 0x12345678], [7, 9]]
    // Segment 0: a far pointer to a landing pad (segment 1, word 0) holding the root struct pointer.
    const far: [number, number] = [((0 << 3) | 2) >>> 0, 1]
    const before = message([[far], [structPointer(0, 1, 6), ...config().slice(1)], other])
    const after = withV8Flags(before, ['--expose-gc'])
    const { segments, texts } = read(after, 2)
    expect(texts).toEqual(['--expose-gc'])
    expect(segments).toHaveLength(3)
    expect([...segments[0]!]).toEqual([...read(before, 2).segments[0]!])
    expect([...segments[2]!]).toEqual([...read(before, 2).segments[2]!])
  })

  it('replaces flags a config already had, and leaves a message alone when there are none to set', () => {
    const once = withV8Flags(message([config()]), ['--a'])
    expect(read(withV8Flags(once, ['--b', '--c']), 2).texts).toEqual(['--b', '--c'])
    const plain = message([config()])
    expect(withV8Flags(plain, [])).toBe(plain)
  })

  it('refuses a root struct without a v8Flags field', () => {
    expect(() => withV8Flags(message([[structPointer(0, 1, 2), [0, 0], NULL, NULL]]), ['--a'])).toThrow(/no v8Flags field/)
  })
})

describe('v8FlagsFromEnv', () => {
  it('splits the space-separated flags; none when unset or blank', () => {
    expect(v8FlagsFromEnv('--a  --b=1 ')).toEqual(['--a', '--b=1'])
    expect(v8FlagsFromEnv(undefined)).toEqual([])
    expect(v8FlagsFromEnv(' ')).toEqual([])
  })
})
