/**
 * Per-key limits (DESIGN.md §3): requests/minute and tokens/minute, decided by a store (Upstash
 * via @upstash/ratelimit in production) behind a failure policy: a store that errors or does not
 * answer within RATE_LIMIT_TIMEOUT_MS is decided by RATE_LIMIT_FAILURE_MODE at once (never after a
 * client library's multi-second retry loop), and counted.
 */
import { TIMED_OUT, within } from '../within.ts'
import type { LimitDecision, Background } from '../context.ts'

/** What a limit store does; refusals are decisions, failures are thrown. */
export interface LimitStore {
  /** `units` requests (default 1) against `rpm` per minute. A decision made without I/O may come back as is. */
  requests(keyId: string, rpm: number, opts?: { units?: number; background?: Background }): LimitDecision | Promise<LimitDecision>
  /** Charges `cost` tokens against `tpm` per minute; a refused charge is not kept. */
  tokens(keyId: string, tpm: number, cost: number, opts?: { background?: Background }): LimitDecision | Promise<LimitDecision>
  /** Gives back `cost` tokens charged earlier. */
  refund(keyId: string, tpm: number, cost: number): Promise<void>
  /** What is left of the key's tokens/min budget, charging nothing (`success`: some is left). */
  peekTokens(keyId: string, tpm: number): LimitDecision | Promise<LimitDecision>
}

export interface RateLimiter {
  checkRequests(keyId: string, rpm: number, background?: Background): Promise<LimitDecision>
  chargeTokens(keyId: string, tpm: number, cost: number, background?: Background): Promise<LimitDecision>
  /**
   * The key's tokens/min figures without a charge, for the headers of a request refused before
   * its charge (a requests/min 429); bounded and degraded like a decision.
   */
  peekTokens(keyId: string, tpm: number): Promise<LimitDecision>
  /** Never throws: a refund lost to a store failure is counted, not reported to the client. */
  refundTokens(keyId: string, tpm: number, cost: number): Promise<void>
  /** Store failures (errors and timeouts) since this isolate started: a metric. */
  failureCount(): number
}

export interface FailurePolicy {
  mode: 'open' | 'closed'
  timeoutMs: number
  now?: () => number
}

/** When a degraded decision says the window resets (a hint for retry-after). */
const DEGRADED_RESET_MS = 1000

export function withFailurePolicy(store: LimitStore, policy: FailurePolicy): RateLimiter {
  const now = policy.now ?? Date.now
  let failures = 0

  const degraded = (limit: number): LimitDecision => {
    failures++
    const open = policy.mode === 'open'
    return { success: open, limit, remaining: open ? limit : 0, resetAtMs: now() + DEGRADED_RESET_MS, degraded: true }
  }

  const decide = async (limit: number, work: () => LimitDecision | Promise<LimitDecision>): Promise<LimitDecision> => {
    let started: LimitDecision | Promise<LimitDecision>
    try {
      started = work()
    } catch {
      return degraded(limit)
    }
    // Decided without I/O (a lease): no timer to arm.
    if (!(started instanceof Promise)) return started
    const result = await within(policy.timeoutMs, () => started)
    return result === TIMED_OUT || result instanceof Error ? degraded(limit) : result
  }

  return {
    checkRequests: (keyId, rpm, background) => decide(rpm, () => store.requests(keyId, rpm, background ? { background } : {})),
    chargeTokens: (keyId, tpm, cost, background) => decide(tpm, () => store.tokens(keyId, tpm, cost, background ? { background } : {})),
    peekTokens: (keyId, tpm) => decide(tpm, () => store.peekTokens(keyId, tpm)),
    async refundTokens(keyId, tpm, cost) {
      const result = await within(policy.timeoutMs, () => store.refund(keyId, tpm, cost).then(() => true))
      if (result !== true) failures++
    },
    failureCount: () => failures,
  }
}
