import { describe, expect, it } from 'vitest'
import { getDialect } from '../../../shared/src/dialects/index.ts'
import { limitHeaders, tokenCost, UNBOUNDED_COMPLETION_TOKENS } from './rate-limit.ts'

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0)

describe('rate-limit headers', () => {
  const state = {
    requests: { success: true, limit: 60, remaining: 59, resetAtMs: NOW + 1500 },
    tokens: { success: true, limit: 1000, remaining: 900, resetAtMs: NOW + 360_000 },
  }

  it('writes the OpenAI names with duration resets', () => {
    expect(limitHeaders(getDialect('openai-chat'), state, NOW)).toEqual({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '2s',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '900',
      'x-ratelimit-reset-tokens': '6m0s',
    })
  })

  it('writes the Anthropic names with RFC 3339 resets', () => {
    expect(limitHeaders(getDialect('anthropic-messages'), state, NOW)).toEqual({
      'anthropic-ratelimit-requests-limit': '60',
      'anthropic-ratelimit-requests-remaining': '59',
      'anthropic-ratelimit-requests-reset': '2026-01-01T12:00:02Z',
      'anthropic-ratelimit-tokens-limit': '1000',
      'anthropic-ratelimit-tokens-remaining': '900',
      'anthropic-ratelimit-tokens-reset': '2026-01-01T12:06:00Z',
    })
  })

  it('shows nothing for a degraded (store down) decision', () => {
    expect(limitHeaders(getDialect('openai-chat'), { requests: { ...state.requests, degraded: true } }, NOW)).toEqual({})
  })
})

describe('tokenCost', () => {
  it('is bytes/4 (rounded up) plus max_tokens, with a default for unbounded requests', () => {
    expect(tokenCost(10, 5)).toBe(3 + 5)
    expect(tokenCost(0, undefined)).toBe(UNBOUNDED_COMPLETION_TOKENS)
    // n choices: the prompt once, each choice's budget.
    expect(tokenCost(10, 5, 4)).toBe(3 + 20)
  })
})
