import { describe, expect, it } from 'vitest'
import { uniforms } from '../generate-model/rng.ts'
import { FIM_SPAN_CHARS, fimPieces, fimSample } from './dataset.ts'

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

  it('a long chunk: the sample spans whole lines of at most FIM_SPAN_CHARS, the lines around it stay', () => {
    const long = Array.from({ length: 200 }, (_, i) => `    value_${i} = compute(${i}, other_${i})\n`).join('')
    const rand = uniforms(3)
    for (let i = 0; i < 50; i++) {
      const { before, span, after } = fimSample(long, rand)
      const text = span.prefix + span.middle + span.suffix
      expect(before + text + after).toBe(long)
      expect(text.length).toBeLessThanOrEqual(FIM_SPAN_CHARS)
      expect(text.length).toBeGreaterThan(FIM_SPAN_CHARS - 60)
      expect(before === '' || before.endsWith('\n')).toBe(true)
      expect(text.endsWith('\n')).toBe(true)
    }
  })
})
