/** Anthropic's rate-limit headers (DESIGN.md §3): `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`. */

import type { LimitHeaderStyle } from './codec.ts'

export const ANTHROPIC_LIMIT_HEADERS: LimitHeaderStyle = {
  names: {
    requests: { limit: 'anthropic-ratelimit-requests-limit', remaining: 'anthropic-ratelimit-requests-remaining', reset: 'anthropic-ratelimit-requests-reset' },
    tokens: { limit: 'anthropic-ratelimit-tokens-limit', remaining: 'anthropic-ratelimit-tokens-remaining', reset: 'anthropic-ratelimit-tokens-reset' },
  },
  // RFC 3339 at whole seconds, rounded up, as Anthropic sends it: `2026-01-01T12:00:02Z`.
  reset: (resetMs, nowMs) => new Date(Math.ceil((nowMs + resetMs) / 1000) * 1000).toISOString().replace('.000Z', 'Z'),
}
