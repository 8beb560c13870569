import { describe, expect, it } from 'vitest'
import { openAIDuration } from './openai-limit-headers.ts'

describe('OpenAI rate-limit headers', () => {
  it('formats durations like OpenAI', () => {
    expect(openAIDuration(20)).toBe('20ms')
    expect(openAIDuration(1000)).toBe('1s')
    expect(openAIDuration(61_000)).toBe('1m1s')
  })
})
