import { describe, expect, it } from 'vitest'
import { Utf8Rules } from './utf8-guard.ts'

const bytes = (...b: number[]) => Uint8Array.from(b)
// 0 'a', 1 a lone continuation, 2 é's lead, 3 a three-byte lead (E0), 4 [A0 80] (E0's valid tail),
// 5 [80 80] (not after E0: overlong), 6 'é' whole, 7 the stop token (no bytes), 8 ED A0 80 (a surrogate)
const TOKENS = [bytes(0x61), bytes(0x80), bytes(0xc3), bytes(0xe0), bytes(0xa0, 0x80), bytes(0x80, 0x80), bytes(0xc3, 0xa9), bytes(), bytes(0xed, 0xa0, 0x80)]
const STOP = 7
const rules = new Utf8Rules(TOKENS, [STOP])
const allowed = (state: number) => {
  const logits = new Float32Array(TOKENS.length)
  rules.mask(logits, state)
  return [...logits.keys()].filter((t) => logits[t] !== -Infinity)
}

describe('Utf8Rules', () => {
  it('between characters: whole characters, character starts and the stop token; no continuation byte, no surrogate', () => {
    expect(allowed(0)).toEqual([0, 2, 3, 6, 7])
  })

  it('owes what a lead byte starts, and only what pays it exactly', () => {
    const afterC3 = rules.after(0, 2)
    expect(allowed(afterC3)).toEqual([1]) // one continuation byte, no stop mid-character
    expect(rules.after(afterC3, 1)).toBe(0)
    const afterE0 = rules.after(0, 3)
    expect(allowed(afterE0)).toEqual([4]) // E0 80 80 would be overlong
    expect(rules.after(afterE0, 4)).toBe(0)
  })

  it('allows() and after() agree with the mask', () => {
    for (let state = 0; state < 8; state++) {
      for (let t = 0; t < TOKENS.length; t++) expect(rules.allows(state, t)).toBe(allowed(state).includes(t))
    }
  })
})
