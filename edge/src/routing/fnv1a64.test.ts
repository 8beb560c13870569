import { describe, expect, it } from 'vitest'
import { Fnv1a64, fnv1a64Hex } from './fnv1a64.ts'

/** The textbook definition over TextEncoder's bytes, in BigInt: what the two-halves version must equal. */
function reference(bytes: Uint8Array): string {
  let h = 0xcbf29ce484222325n
  for (const b of bytes) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn
  return h.toString(16).padStart(16, '0')
}

describe('Fnv1a64', () => {
  it('matches the published FNV-1a 64 test vectors', () => {
    expect(fnv1a64Hex('')).toBe('cbf29ce484222325')
    expect(fnv1a64Hex('a')).toBe('af63dc4c8601ec8c')
    expect(fnv1a64Hex('foobar')).toBe('85944171f73967e8')
  })

  it('hashes the UTF-8 bytes TextEncoder produces, lone surrogates as U+FFFD', () => {
    for (const s of ['héllo wörld', '日本語のシステムプロンプト', 'emoji 🙂🚀 mixed', 'lone \ud800 high', 'lone \udc00 low', 'end \ud83d', 'x'.repeat(5000)]) {
      expect(fnv1a64Hex(s), s.slice(0, 20)).toBe(reference(new TextEncoder().encode(s)))
    }
  })

  it('stops after maxBytes of UTF-8, even inside a multi-byte character', () => {
    const s = 'ab日本'
    const bytes = new TextEncoder().encode(s)
    for (let n = 0; n <= bytes.length + 1; n++) expect(new Fnv1a64().text(s, n).hex()).toBe(reference(bytes.slice(0, n)))
  })

  it('tells composite keys apart by their field boundaries', () => {
    const ab_c = new Fnv1a64().field('ab').field('c').hex()
    const a_bc = new Fnv1a64().field('a').field('bc').hex()
    expect(ab_c).not.toBe(a_bc)
    expect(new Fnv1a64().field('ab').field('c').hex()).toBe(ab_c)
  })

  it('spreads ring points over the 32-bit range for names that differ only at the end', () => {
    const points = Array.from({ length: 4096 }, (_, i) => new Fnv1a64().text(`node-a#${i}`).point())
    expect(new Set(points).size).toBe(points.length)
    // Each sixteenth of the range holds about 1/16 of the points (binomial sd ≈ 15 at 256 expected).
    const bins = new Array<number>(16).fill(0)
    for (const p of points) bins[p >>> 28]!++
    for (const b of bins) expect(Math.abs(b - 256)).toBeLessThan(80)
  })
})
