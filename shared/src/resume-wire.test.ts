import { describe, expect, it } from 'vitest'
import { decodeTokens, encodeTokens, parseResumeHeader, parseResumeId, resumeHeader, resumeIdLine } from './resume-wire.ts'

describe('resume wire encoding', () => {
  it('round-trips token ids through base64url varints, compactly', () => {
    const ids = [0, 1, 127, 128, 300, 16383, 16384, 31999, 151_935, 2 ** 31]
    expect(decodeTokens(encodeTokens(ids))).toEqual(ids)
    expect(encodeTokens([])).toBe('')
    expect(decodeTokens('')).toEqual([])
    expect(encodeTokens([5, 6, 7])).toMatch(/^[A-Za-z0-9_-]{4}$/)
  })

  it('refuses what is not an encoding: other alphabets, a cut varint', () => {
    expect(decodeTokens('a+b/')).toBeUndefined()
    expect(decodeTokens(encodeTokens([300]).slice(0, 1))).toBeUndefined()
  })

  it('writes and reads the id line', () => {
    const line = resumeIdLine(12, [3, 4])
    expect(line).toMatch(/^id: 12\.[A-Za-z0-9_-]+\n$/)
    expect(parseResumeId(line.slice(4, -1))).toEqual({ generated: 12, tokens: [3, 4], flushed: false })
    expect(parseResumeId(resumeIdLine(13, [], true).slice(4, -1))).toEqual({ generated: 13, tokens: [], flushed: true })
    expect(parseResumeHeader(resumeHeader([9, 300], true))).toEqual({ tokens: [9, 300], flushed: true })
    expect(parseResumeHeader(resumeHeader([9], false))).toEqual({ tokens: [9], flushed: false })
    expect(parseResumeId('abc')).toBeUndefined()
  })
})
