import { describe, expect, it } from 'vitest'
import { uniforms } from '../generate-model/rng.ts'
import { FIM_SPAN_CHARS, fimPieces, fimSplit } from './dataset.ts'

describe('fill-in-the-middle samples', () => {
  const chunk = 'def f(x):\n    """Twice x."""\n    y = x * 2\n    return y\n\n\nZ = f(1)\n'
  const lineStarts = new Set([0, ...[...chunk.matchAll(/\n/g)].map((m) => m.index! + 1)])

  it('cut a chunk into prefix, middle and suffix that rebuild it; about half take out whole lines', () => {
    const rand = uniforms(7)
    let whole = 0
    for (let i = 0; i < 400; i++) {
      const p = fimPieces(chunk, rand)
      expect(p.prefix + p.middle + p.suffix).toBe(chunk)
      const lines = p.middle.split('\n').length - 1
      if (p.middle !== '' && lineStarts.has(p.prefix.length) && p.middle.endsWith('\n') && lines >= 1 && lines <= 4) whole++
    }
    // Character cuts land on whole lines by chance only rarely in a 7-line chunk.
    expect(whole).toBeGreaterThan(160)
    expect(whole).toBeLessThan(260)
  })

  it('a line cut at the last line ends the middle at the chunk’s end', () => {
    const seq = [0, 0.99, 0.99] // line-level; the last line start; 4 lines asked, 1 there
    const p = fimPieces(chunk, () => seq.shift()!)
    expect(p).toEqual({ prefix: chunk.slice(0, chunk.lastIndexOf('Z')), middle: 'Z = f(1)\n', suffix: '' })
  })

  it('a long chunk: every span of whole lines, at most FIM_SPAN_CHARS, is a sample about half the time; the rest stays plain text', () => {
    const long = Array.from({ length: 200 }, (_, i) => `    value_${i} = compute(${i}, other_${i})\n`).join('')
    const rand = uniforms(3)
    let fims = 0
    let plains = 0
    for (let i = 0; i < 50; i++) {
      const pieces = fimSplit(long, rand)
      expect(pieces.map((p) => ('plain' in p ? p.plain : p.fim.prefix + p.fim.middle + p.fim.suffix)).join('')).toBe(long)
      let at = 0
      for (const [k, p] of pieces.entries()) {
        const text = 'plain' in p ? p.plain : p.fim.prefix + p.fim.middle + p.fim.suffix
        at += text.length
        if ('plain' in p) {
          plains++
          // Plain spans next to each other are one piece.
          expect(k === 0 || !('plain' in pieces[k - 1]!)).toBe(true)
          expect(p.plain.endsWith('\n')).toBe(true)
          continue
        }
        fims++
        expect(text.length).toBeLessThanOrEqual(FIM_SPAN_CHARS)
        // Only the chunk's last span may be shorter than a line less than the most.
        if (at < long.length) expect(text.length).toBeGreaterThan(FIM_SPAN_CHARS - 60)
        expect(text.endsWith('\n')).toBe(true)
      }
    }
    // ~7 spans per chunk, each a sample with probability FIM_RATE.
    expect(fims / 50).toBeGreaterThan(2.5)
    expect(fims / 50).toBeLessThan(5)
    expect(plains).toBeGreaterThan(50)
  })

  it('a line longer than FIM_SPAN_CHARS is a span of its own', () => {
    const text = `a = 1\n${'x'.repeat(FIM_SPAN_CHARS + 10)}\nb = 2\n`
    const pieces = fimSplit(text, () => 0) // every span a sample, its middle the span's first line
    expect(pieces).toEqual(['a = 1\n', `${'x'.repeat(FIM_SPAN_CHARS + 10)}\n`, 'b = 2\n'].map((middle) => ({ fim: { prefix: '', middle, suffix: '' } })))
  })
})
