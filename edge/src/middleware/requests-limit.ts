/**
 * Step 3 of DESIGN.md §3, requests/minute, in two halves around the body:
 *
 * - `startRequestsCheck` asks the limiter as soon as the caller is known and does not wait;
 * - the body is read and parsed meanwhile (validate.ts), so a body that fails validation is
 *   answered 4xx at once, whatever the limiter's Redis is doing — before, every hostile body
 *   waited for the requests/min decision (up to RATE_LIMIT_TIMEOUT_MS when Redis was slow), and
 *   one that arrived with a slow store waited out the timeout before its 400;
 * - `admitRequests` (after parsing, before the model lookup) awaits the decision: 429, or on.
 *
 * The request is still counted either way (the check was made; the Workers entry keeps it alive
 * with waitUntil when the answer goes out first), so a client cannot dodge its limit by sending
 * invalid bodies. A refusal already known when the body has been read (a lease decides without
 * I/O) is answered 429 before parsing (`refuseIfKnownRefused`): a refused client still costs no
 * parsing when the edge knows it is refused.
 */
import type { Context } from 'hono'
import type { AppEnv, RequestsCheck, LimitDecision } from '../context.ts'
import type { RateLimiter } from '../limits/rate-limiter.ts'
import type { Step } from './pipeline.ts'
import { refusal } from './rate-limit.ts'

export function startRequestsCheck(limiter: RateLimiter): Step {
  return (c) => {
    const { keyId, rpm } = c.get('principal')
    const check: RequestsCheck = { decision: limiter.checkRequests(keyId, rpm, c.get('waitUntil')) }
    // The limiter never rejects (its failure policy decides); this only records the answer.
    void check.decision.then((d) => (check.settled = d))
    c.get('waitUntil')(check.decision)
    c.set('requestsCheck', check)
  }
}

/** Throws the 429 when the decision is already in and refused; costs nothing otherwise. */
export async function refuseIfKnownRefused(c: Context<AppEnv>, limiter: RateLimiter, now: () => number): Promise<void> {
  const settled = c.get('requestsCheck')?.settled
  if (settled && !settled.success) await admit(c, settled, limiter, now)
}

/** Awaits the decision, unless it is already in (a lease decides without I/O): then at once. */
export function admitRequests(limiter: RateLimiter, now: () => number): Step {
  return (c) => {
    const check = c.get('requestsCheck')
    if (check.settled) return admit(c, check.settled, limiter, now)
    return check.decision.then((d) => admit(c, d, limiter, now))
  }
}

/** Records the decision; a refusal throws its 429 (after reading the tokens figures, when it can). */
function admit(c: Context<AppEnv>, decision: LimitDecision, limiter: RateLimiter, now: () => number): void | Promise<void> {
  const state = c.get('rateLimit')
  state.requests = decision
  if (decision.success) return
  return refuse(c, decision, limiter, now)
}

async function refuse(c: Context<AppEnv>, decision: LimitDecision, limiter: RateLimiter, now: () => number): Promise<void> {
  const state = c.get('rateLimit')
  const { keyId, rpm, tpm } = c.get('principal')
  // A 429 carries both families (requests and tokens), as OpenAI's and Anthropic's do; the
  // tokens/min step never runs for this request, so its figures are read, not charged.
  if (!decision.degraded) state.tokens = await limiter.peekTokens(keyId, tpm)
  throw refusal(decision, now(), `Rate limit reached: this key allows ${rpm} requests per minute.`)
}
