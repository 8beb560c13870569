/**
 * Step 4b (tokens/minute, right after validation) of DESIGN.md §3 (requests/minute, step 3, is
 * requests-limit.ts), plus the dialect's rate-limit headers on every response of a limited
 * route, 429s included.
 *
 * Token cost = estimated prompt tokens (body bytes / 4) + max_tokens, charged up front; the
 * generate handler refunds it (refundCharge) when the request is refused later. A request that
 * sets no max_tokens (OpenAI chat: "up to the context length") is charged UNBOUNDED_COMPLETION_TOKENS.
 */
import type { Context } from 'hono'
import { ApiError } from '../../../shared/src/api-error.ts'
import type { DialectCodec, LimitKind } from '../../../shared/src/dialects/index.ts'
import type { AppEnv, Around, RateLimitState, LimitDecision } from '../context.ts'
import type { RateLimiter } from '../limits/rate-limiter.ts'
import type { ReadAlong } from '../redis/read-along.ts'
import { affinityRedisKey } from '../routing/affinity-memory.ts'
import type { Step } from './pipeline.ts'

/** Completion tokens assumed for a request without max_tokens. */
export const UNBOUNDED_COMPLETION_TOKENS = 1024
/** Retry hint when the limiter's store is down and the mode is closed. */
const STORE_RETRY_MS = 1000

/** The prompt (estimated from the body) once, and each of the `n` choices' completion budget. */
export function tokenCost(bodyBytes: number, maxTokens: number | undefined, n = 1): number {
  return Math.ceil(bodyBytes / 4) + (maxTokens ?? UNBOUNDED_COMPLETION_TOKENS) * n
}

/** A limited route's first step: its limits' state, and the dialect whose headers say them. */
export function openLimits(codec: DialectCodec): Step {
  return (c) => {
    c.set('rateLimit', {})
    c.set('limitCodec', codec)
  }
}

/**
 * After a limited route's answer exists (around.ts, outside the route, so an answer made from its
 * refusal has them too): the dialect's rate-limit headers (x-ratelimit-*, anthropic-ratelimit-*, …)
 * on an answer the edge made itself. A forwarded response already has them (generate.ts).
 */
export function rateLimitHeaders(now: () => number): Around {
  return {
    after(c) {
      const codec = c.get('limitCodec')
      if (!codec || c.get('edgeHeadersAdded')) return
      const headers = limitHeaders(codec, c.get('rateLimit'), now())
      for (const [name, value] of Object.entries(headers)) c.res.headers.set(name, value)
    },
  }
}

/**
 * `readAlong`: the request's affinity entry is read in the same Redis round trip as its token
 * charge, when the charge goes to Redis (redis/read-along.ts); it is withdrawn once the charge is
 * decided, so a charge served from a lease reads nothing and waits for nothing.
 */
export function limitTokens(limiter: RateLimiter, now: () => number, readAlong?: ReadAlong): Step {
  return async (c) => {
    const state = c.get('rateLimit')
    // Redis already failed this request's requests/min check and the failure policy admitted it
    // (closed mode refused it there): waiting out the timeout a second time would break the
    // "decided within RATE_LIMIT_TIMEOUT_MS" promise.
    if (state.requests?.degraded) return
    const { keyId, tpm } = c.get('principal')
    const { body, gen } = c.get('generate')
    const cost = tokenCost(body.byteLength, gen.maxTokens, gen.n)
    const affinity = c.get('affinity')
    const withdraw = affinity && readAlong ? readAlong.ask(keyId, affinityRedisKey(affinity.hash)) : undefined
    let decision: LimitDecision
    try {
      decision = await limiter.chargeTokens(keyId, tpm, cost, c.get('waitUntil'))
    } finally {
      withdraw?.()
    }
    state.tokens = decision
    if (!decision.success) {
      const message = cost > tpm
        ? `Request too large: an estimated ${cost} tokens (prompt + max_tokens) exceed this key's limit of ${tpm} tokens per minute.`
        : `Rate limit reached: this key allows ${tpm} tokens per minute; this request needs an estimated ${cost}.`
      throw refusal(decision, now(), message)
    }
    if (!decision.degraded) state.chargedTokens = cost
  }
}

/** Gives back the up-front token charge of a request that was refused after it (at most once). */
export function refundCharge(c: Context<AppEnv>, limiter: RateLimiter): Promise<void> | undefined {
  const state = c.get('rateLimit')
  const cost = state?.chargedTokens
  if (!cost) return undefined
  state.chargedTokens = undefined
  const { keyId, tpm } = c.get('principal')
  if (state.tokens) state.tokens = { ...state.tokens, remaining: Math.min(state.tokens.limit, state.tokens.remaining + cost) }
  return limiter.refundTokens(keyId, tpm, cost)
}

/** The 429 (or, for a store failure in closed mode, the 503/529) for a refused decision. */
export function refusal(decision: LimitDecision, nowMs: number, message: string): ApiError {
  if (decision.degraded) {
    return new ApiError('overloaded', 'Rate limiting is temporarily unavailable; please retry shortly.', { retryAfterMs: STORE_RETRY_MS })
  }
  return new ApiError('rate_limited', message, { retryAfterMs: Math.max(1, decision.resetAtMs - nowMs) })
}

/** Header values, in the codec's names, for the decisions made so far; a degraded decision has no real numbers to show. */
export function limitHeaders(codec: DialectCodec, state: RateLimitState | undefined, nowMs: number): Record<string, string> {
  const out: Record<string, string> = {}
  putLimitHeaders(out, codec, state, nowMs)
  return out
}

/** The same headers written into `out` (a forwarded answer's own record: generate.ts). */
export function putLimitHeaders(out: Record<string, string>, codec: DialectCodec, state: RateLimitState | undefined, nowMs: number): void {
  putLimit(out, codec, 'requests', state?.requests, nowMs)
  putLimit(out, codec, 'tokens', state?.tokens, nowMs)
}

function putLimit(out: Record<string, string>, codec: DialectCodec, kind: LimitKind, d: LimitDecision | undefined, nowMs: number): void {
  if (!d || d.degraded) return
  const style = codec.limitHeaders
  const names = style.names[kind]
  out[names.limit] = String(d.limit)
  out[names.remaining] = String(d.remaining)
  out[names.reset] = style.reset(Math.max(0, d.resetAtMs - nowMs), nowMs)
}
