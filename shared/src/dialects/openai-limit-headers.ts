/** OpenAI's rate-limit headers (DESIGN.md §3): `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`. */

import type { LimitHeaderStyle } from './codec.ts'

export const OPENAI_LIMIT_HEADERS: LimitHeaderStyle = {
  names: {
    requests: { limit: 'x-ratelimit-limit-requests', remaining: 'x-ratelimit-remaining-requests', reset: 'x-ratelimit-reset-requests' },
    tokens: { limit: 'x-ratelimit-limit-tokens', remaining: 'x-ratelimit-remaining-tokens', reset: 'x-ratelimit-reset-tokens' },
  },
  reset: (resetMs) => openAIDuration(resetMs),
}

/** OpenAI's reset format: `850ms`, `12s`, `6m0s`. */
export function openAIDuration(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)}ms`
  const s = Math.ceil(ms / 1000)
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`
}
