import { describe, expect, it } from 'vitest'
import { KeyHash } from './key-hash.ts'

/** The hash of one string, as hex. */
const keyHashHex = (text: string): string => new KeyHash().text(text).hex()

/** bryc's cyrb53 as published (53 bits of the same two lanes): the oracle for text(). */
function cyrb53(str: string): number {
  let h1 = 0xdeadbeef
  let h2 = 0x41c6ce57
  for (let i = 0; i < str.length; i++) {
    const ch = str.charCodeAt(i)
    h1 = Math.imul(h1 ^ ch, 2654435761)
    h2 = Math.imul(h2 ^ ch, 1597334677)
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909)
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909)
  return 4294967296 * (2097151 & h2) + (h1 >>> 0)
}

/** The low 53 bits of a 16-hex-digit hash, as cyrb53 returns them. */
const low53 = (hex: string) => Number(BigInt(`0x${hex}`) & ((1n << 53n) - 1n))

describe('KeyHash', () => {
  it('is cyrb53 over the same code units, keeping all 64 bits', () => {
    expect(cyrb53('a')).toBe(7929297801672961) // the published value
    for (const s of ['', 'a', 'hello world', 'héllo wörld', '日本語のシステムプロンプト', 'emoji 🙂🚀', 'x'.repeat(5000)]) {
      expect(low53(keyHashHex(s)), s.slice(0, 12)).toBe(cyrb53(s))
    }
  })

  it('pins known values (a change here changes every Redis key: bump KEY_VERSION)', () => {
    expect([keyHashHex(''), keyHashHex('a'), keyHashHex('hello world'), new KeyHash().field('ab').field('c').hex(), new KeyHash().text('abc').point()]).toEqual([
      '488bdcb81aee8d83', '501c2ba782c97901', '53ab9417d15d1014', '0cff6597420348df', 448892045,
    ])
  })

  it('hashes at most maxUnits code units: a longer text with the same head hashes the same', () => {
    expect(new KeyHash().text('abcdef', 3).hex()).toBe(keyHashHex('abc'))
    expect(new KeyHash().text('ab', 3).hex()).toBe(keyHashHex('ab'))
  })

  it('hashes a long field by its length, head and tail, and a short one whole', () => {
    const whole = (t: string) => new KeyHash().field(t).hex()
    const sampled = (t: string) => new KeyHash().sampledField(t, 4).hex()
    expect(sampled('abcdefgh')).toBe(whole('abcdefgh'))
    const long = 'head' + 'x'.repeat(100) + 'tail'
    expect(sampled(long)).toBe(sampled('head' + 'y'.repeat(100) + 'tail'))
    expect(sampled(long)).not.toBe(whole(long))
    // Every part that is read counts: the head, the tail and the length.
    expect(sampled('Head' + 'x'.repeat(100) + 'tail')).not.toBe(sampled(long))
    expect(sampled('head' + 'x'.repeat(100) + 'taiL')).not.toBe(sampled(long))
    expect(sampled('head' + 'x'.repeat(101) + 'tail')).not.toBe(sampled(long))
  })

  it('tells composite keys apart by their field boundaries', () => {
    const ab_c = new KeyHash().field('ab').field('c').hex()
    expect(new KeyHash().field('a').field('bc').hex()).not.toBe(ab_c)
    expect(new KeyHash().field('ab').field('c').hex()).toBe(ab_c)
  })

  it('spreads ring points over the 32-bit range for names that differ only at the end', () => {
    const points = Array.from({ length: 4096 }, (_, i) => new KeyHash().field('node-a').text(`#${i}`).point())
    expect(new Set(points).size).toBe(points.length)
    // Each sixteenth of the range holds about 1/16 of the points (binomial sd ≈ 15 at 256 expected).
    const bins = new Array<number>(16).fill(0)
    for (const p of points) bins[p >>> 28]!++
    for (const b of bins) expect(Math.abs(b - 256)).toBeLessThan(80)
  })
})
