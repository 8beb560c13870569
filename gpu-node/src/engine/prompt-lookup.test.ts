import { describe, expect, it } from 'vitest'
import { proposeDraft as propose } from './prompt-lookup.ts'

/** The draft's tokens ([] when none). */
const proposeDraft = (tokens: number[], maxDraft: number) => propose(tokens, maxDraft)?.tokens ?? []

describe('prompt lookup drafting', () => {
  it('proposes what followed the latest earlier occurrence of the last n-gram', () => {
    // "a b c d | a b c" → the 3-gram a b c was followed by d, and then by the suffix's own start.
    expect(proposeDraft([1, 2, 3, 4, 9, 1, 2, 3], 3)).toEqual([4, 9, 1])
  })

  it('tries the longest n-gram first, so a longer context picks the right place', () => {
    // The last token 3 occurs twice before; only the 2-gram "2 3" names the occurrence followed by 7.
    const tokens = [5, 3, 8, 8, 2, 3, 7, 7, 6, 2, 3]
    expect(proposeDraft(tokens, 2)).toEqual([7, 7])
  })

  it('of occurrences of one length, takes the latest', () => {
    expect(proposeDraft([1, 2, 10, 1, 2, 20, 1, 2], 1)).toEqual([20])
  })

  it('falls back to shorter n-grams down to one token, and says which length found the draft', () => {
    expect(propose([4, 5, 6, 9, 6], 2)).toEqual({ tokens: [9, 6], ngram: 1 })
    expect(propose([1, 2, 3, 4, 9, 1, 2, 3], 1)).toEqual({ tokens: [4], ngram: 3 })
  })

  it('stops at maxDraft', () => {
    expect(proposeDraft([1, 2, 3, 4, 5, 6, 1, 2], 2)).toEqual([3, 4])
  })

  it('continues a match that runs into the end with the period it found (a loop, a run of one token)', () => {
    expect(proposeDraft([1, 2, 3, 1, 2], 8)).toEqual([3, 1, 2, 3, 1, 2, 3, 1])
    expect(proposeDraft([7, 7, 7, 7], 4)).toEqual([7, 7, 7, 7])
    expect(proposeDraft([3, 7, 7, 7, 7, 7, 7], 2)).toEqual([7, 7])
  })

  it('proposes nothing when the last token never occurred before, or when no draft is wanted', () => {
    expect(proposeDraft([1, 2, 3, 4], 4)).toEqual([])
    expect(proposeDraft([5], 4)).toEqual([])
    expect(proposeDraft([], 4)).toEqual([])
    expect(propose([1, 2, 1], 0)).toBeUndefined()
    expect(propose([1, 2, 3], 4)).toBeUndefined()
  })
})
