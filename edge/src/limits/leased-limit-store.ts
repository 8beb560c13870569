/**
 * Leases in front of the Redis limit store, so a busy key's requests are admitted without a
 * Redis round trip on their path — the time a gateway adds is mostly that round trip.
 *
 * Per key and limit, this isolate takes a small block of units (requests or tokens) from Redis
 * in ONE atomic @upstash/ratelimit call and spends it locally, refilling in the background
 * before it runs out. The rules keep the budget honest:
 * - Redis is still the only source of admissions: a leased unit was counted in Redis when it
 *   was taken, so all isolates together never admit more than the limit (refusals can come a
 *   little early while other isolates hold unspent units; those lapse after `ttlMs`).
 * - Every refusal is Redis's own answer (the exact path), so 429s and their retry-after are real.
 * - A lease is at most `maxFraction` of the limit, at most half of what Redis says is left, and at
 *   most what this isolate spent in the last `ttlMs` — or, for the exact call that opens a burst,
 *   in its busiest `ttlMs` of the last `PEAK_MEMORY_MS`: small limits (below 2 / maxFraction) and
 *   quiet keys never lease and take the exact path on every request, and a lapsed lease wastes
 *   at most one lease period of this isolate's own recent traffic.
 * - A key busy within the last minute whose lease lapsed (a client that fans out a batch of
 *   requests every few seconds) takes a lease in the same call as the burst's first request, so
 *   the requests arriving behind it are admitted from that lease when it answers: one Redis round
 *   trip per limit for the burst instead of two.
 * - Units are spent locally at most `ttlMs` after they were taken, so a sliding window counts
 *   them within that much of when they were spent. (A lease smaller than a token charge is put
 *   towards that charge on the exact path, however old: the tokens left the bucket already.)
 * - A failed or refused refill changes nothing: the next request that finds the lease empty
 *   takes the exact path (with the failure policy of rate-limiter.ts around it).
 * - With `coalesce` (a long-lived process only: on Workers a promise started by one request may
 *   never settle for another), a key has at most one exact call in flight. Requests that need
 *   the exact path meanwhile wait for it, then go as ONE call charging their sum: a burst on a
 *   quiet key costs a few round trips instead of one each, which otherwise queue up in Redis.
 *   A joint call is made only when the sum is at most half of what Redis last said is left;
 *   near the limit, and when a joint call is refused, each waiter asks Redis alone, so
 *   refusals stay exact.
 * - Without `coalesce` (Workers), a request that finds the lease empty while this isolate's call
 *   that brings units is in flight (a burst's first exact call with its lease, or a refill) waits
 *   for those units instead of asking Redis itself: it looks at the lease every few ms from its
 *   own timer (within.ts pollFor: plain data, never another request's promise) for at most `burstWaitMs`,
 *   then (no units came, too few, or the call failed) takes the exact path as before. A burst of
 *   64 on a busy key thus costs one Redis call per limit instead of 64, which queued in Redis.
 */
import { pollFor, startedWithin } from '../within.ts'
import type { LimitStore } from './rate-limiter.ts'
import type { Background, LimitDecision } from '../context.ts'

export interface LeaseOptions {
  /** Longest a leased unit may be spent after it was taken (ms). */
  ttlMs: number
  /** Largest lease as a fraction of the limit. */
  maxFraction: number
  now?: () => number
  /** Keys (kind × key × limit) kept per isolate; the table is cleared when full. */
  maxEntries?: number
  /** One exact call in flight per key; the requests that arrive meanwhile share the next. */
  coalesce?: boolean
  /** Without `coalesce`: longest a request waits for the units of a call in flight (default DEFAULT_BURST_WAIT_MS). */
  burstWaitMs?: number
}

export const DEFAULT_LEASE: LeaseOptions = { ttlMs: 1000, maxFraction: 1 / 32 }
/**
 * Half of the limiter's default timeout (RATE_LIMIT_TIMEOUT_MS, 300 ms): a request that waited
 * this long for another's call still has time for its own.
 */
export const DEFAULT_BURST_WAIT_MS = 150

interface Lease {
  /** Units taken from Redis and not spent yet (valid until expiresAtMs). */
  units: number
  expiresAtMs: number
  /** Redis's last answer for this key (remaining after everything leased so far). */
  last?: LimitDecision
  /** When the refill in flight started (0: none). A stuck one is ignored after STUCK_MS. */
  refillSinceMs: number
  /** Units spent in the current and the previous ttl period: this isolate's demand. */
  spent: number
  spentBefore: number
  periodStartMs: number
  /** The most spent in one period that ended within PEAK_MEMORY_MS, and when that period ended. */
  peak: number
  peakEndMs: number
  /** When the exact call carrying a burst's lease started (0: none in flight). */
  burstSinceMs: number
  /** Set while an exact call is in flight (coalesce): the requests waiting for the next one. */
  queue?: Waiter[]
}

interface Waiter {
  cost: number
  resolve(decision: LimitDecision | Promise<LimitDecision>): void
}

type Take = (units: number) => Promise<LimitDecision>

/** A refill that has not answered in this long is treated as lost (its units never arrive). */
const STUCK_MS = 5000
/** How long a key's busiest period sizes the lease taken with a burst's first call. */
export const PEAK_MEMORY_MS = 60_000

/** A call that started at `sinceMs` (0: none) and may still answer. */
function inFlight(sinceMs: number, at: number): boolean {
  return startedWithin(sinceMs, at, STUCK_MS)
}

export function createLeasedLimitStore(exact: LimitStore, options: LeaseOptions = DEFAULT_LEASE): LimitStore {
  const now = options.now ?? Date.now
  const maxEntries = options.maxEntries ?? 10_000
  const burstWaitMs = options.burstWaitMs ?? DEFAULT_BURST_WAIT_MS
  const leases = new Map<string, Lease>()

  const leaseOf = (id: string): Lease => {
    let lease = leases.get(id)
    if (!lease) {
      if (leases.size >= maxEntries) leases.clear()
      lease = { units: 0, expiresAtMs: 0, refillSinceMs: 0, spent: 0, spentBefore: 0, periodStartMs: now(), peak: 0, peakEndMs: 0, burstSinceMs: 0 }
      leases.set(id, lease)
    }
    return lease
  }

  const noteSpent = (lease: Lease, units: number, at: number) => {
    const periods = Math.floor((at - lease.periodStartMs) / options.ttlMs)
    if (periods > 0) {
      const endMs = lease.periodStartMs + options.ttlMs
      if (lease.spent >= lease.peak || at - lease.peakEndMs > PEAK_MEMORY_MS) {
        lease.peak = lease.spent
        lease.peakEndMs = endMs
      }
      lease.spentBefore = periods === 1 ? lease.spent : 0
      lease.spent = 0
      lease.periodStartMs += periods * options.ttlMs
    }
    lease.spent += units
  }

  /** Starts a background refill when the lease is low and a lease would be worth having. */
  const maybeRefill = (lease: Lease, limit: number, take: Take, background: Background | undefined) => {
    const at = now()
    if (inFlight(lease.refillSinceMs, at)) return
    const size = Math.floor(Math.min(limit * options.maxFraction, (lease.last?.remaining ?? 0) / 2, Math.max(lease.spent, lease.spentBefore)))
    if (size < 2) return
    const live = at < lease.expiresAtMs ? lease.units : 0
    if (live * 2 > size) return
    lease.refillSinceMs = at
    const since = at
    const work = take(size).then(
      (decision) => {
        if (lease.refillSinceMs !== since) return
        lease.last = decision
        if (!decision.success) return
        const t = now()
        lease.units = (t < lease.expiresAtMs ? lease.units : 0) + size
        lease.expiresAtMs = t + options.ttlMs
      },
      () => {},
    ).finally(() => {
      if (lease.refillSinceMs === since) lease.refillSinceMs = 0
    })
    background?.(work)
  }

  /** Decided locally (returned as is, no promise) when the lease covers it; else by Redis. */
  const spend = (id: string, limit: number, cost: number, take: Take, background: Background | undefined): LimitDecision | Promise<LimitDecision> => {
    const lease = leaseOf(id)
    noteSpent(lease, cost, now())
    const local = fromLease(lease, limit, cost, take, background)
    if (local) return local
    if (options.coalesce) return coalesced(lease, limit, cost, take, background)
    return unitsComing(lease, now()) ? awaitUnits(lease, limit, cost, take, background) : exactly(lease, limit, cost, take, background)
  }

  /** A call of this isolate that brings units (a burst's lease, a refill) is on its way. */
  const unitsComing = (lease: Lease, at: number) => inFlight(lease.burstSinceMs, at) || inFlight(lease.refillSinceMs, at)

  /** Waits, on this request's own timer, for the units of the call in flight; else the exact path. */
  const awaitUnits = async (lease: Lease, limit: number, cost: number, take: Take, background: Background | undefined): Promise<LimitDecision> => {
    const local = await pollFor(() => fromLease(lease, limit, cost, take, background), () => unitsComing(lease, now()), burstWaitMs)
    return local ?? exactly(lease, limit, cost, take, background)
  }

  const fromLease = (lease: Lease, limit: number, cost: number, take: Take, background: Background | undefined): LimitDecision | undefined => {
    if (!(now() < lease.expiresAtMs && lease.units >= cost && lease.last)) return undefined
    lease.units -= cost
    maybeRefill(lease, limit, take, background)
    return { success: true, limit, remaining: Math.max(0, lease.last.remaining + lease.units), resetAtMs: lease.last.resetAtMs }
  }

  /** The exact path with at most one call in flight per key; later requests wait and share the next. */
  const coalesced = (lease: Lease, limit: number, cost: number, take: Take, background: Background | undefined): Promise<LimitDecision> => {
    if (lease.queue) return new Promise((resolve) => lease.queue!.push({ cost, resolve }))
    lease.queue = []
    const call = exactly(lease, limit, cost, take, background)
    const next = () => {
      const waiting = lease.queue!
      lease.queue = undefined
      if (waiting.length > 0) decideWaiting(lease, limit, waiting, take, background)
    }
    call.then(next, next)
    return call
  }

  const decideWaiting = (lease: Lease, limit: number, waiting: Waiter[], take: Take, background: Background | undefined) => {
    // A refill may have landed while they waited: what the lease covers is decided now.
    const rest = waiting.filter((w) => {
      const local = fromLease(lease, limit, w.cost, take, background)
      if (local) w.resolve(local)
      return !local
    })
    if (rest.length === 0) return
    if (rest.length === 1) return rest[0].resolve(coalesced(lease, limit, rest[0].cost, take, background))
    // One joint call only where it fits, like a refill: at most half of what Redis said is left.
    // (A sliding window counts a multi-unit call that does not fit, and refuses it.) Otherwise,
    // near the limit, each asks Redis alone.
    const total = rest.reduce((sum, w) => sum + w.cost, 0)
    if (total > (lease.last?.remaining ?? 0) / 2) {
      for (const w of rest) w.resolve(exactly(lease, limit, w.cost, take, background))
      return
    }
    const joint = coalesced(lease, limit, total, take, background)
    joint.then(
      (decision) => {
        // Refused as a whole: each asks Redis on its own, so every refusal is Redis's answer.
        for (const w of rest) w.resolve(decision.success ? decision : exactly(lease, limit, w.cost, take, background))
      },
      (e: unknown) => {
        for (const w of rest) w.resolve(Promise.reject(e))
      },
    )
  }

  /**
   * Units to lease with an exact call: the key's busiest period of the last minute (it lapsed, and
   * a burst is starting), capped like a refill and, like a joint call, only where the whole charge
   * is at most half of what Redis last said is left — so it fits, and a refusal stays rare.
   */
  const burstLease = (lease: Lease, limit: number, charge: number): number => {
    const at = now()
    if (!lease.last || at - lease.peakEndMs > PEAK_MEMORY_MS) return 0
    // One at a time, and not while a refill is on its way (without coalescing, a request that
    // waited out such a call and found too few units comes here too).
    if (unitsComing(lease, at)) return 0
    const size = Math.floor(Math.min(limit * options.maxFraction, lease.last.remaining / 2 - charge, lease.peak))
    return size >= 2 ? size : 0
  }

  const exactly = async (lease: Lease, limit: number, cost: number, take: Take, background: Background | undefined): Promise<LimitDecision> => {
    // The exact path: Redis decides this request (and any refusal is its own). Units the lease
    // holds that fall short of the charge (a big token charge) count towards it — even lapsed
    // ones, as they were taken from this key's budget — so they are neither held back from the
    // request that needs them nor lost to a client that retries after a 429. A lapsed lease
    // big enough for the charge is dropped instead: spending it would stretch its window. (A live
    // one that big never gets here: spend() used it.)
    // Held units are claimed before the call, so a concurrent exact call cannot count them too;
    // they come back if Redis refuses or fails.
    const held = lease.units < cost ? lease.units : 0
    lease.units = 0
    let extra = burstLease(lease, limit, cost - held)
    const burstSince = extra > 0 ? (lease.burstSinceMs = now()) : 0
    let decision: LimitDecision
    try {
      decision = await take(cost - held + extra)
      // Refused with a lease on top: ask again for this request alone, so its answer is Redis's own.
      if (!decision.success && extra > 0) {
        extra = 0
        decision = await take(cost - held)
      }
    } catch (e) {
      lease.units += held
      throw e
    } finally {
      if (burstSince !== 0 && lease.burstSinceMs === burstSince) lease.burstSinceMs = 0
    }
    if (decision.success) {
      if (extra > 0) {
        const t = now()
        lease.units = (t < lease.expiresAtMs ? lease.units : 0) + extra
        lease.expiresAtMs = t + options.ttlMs
      }
      lease.last = Object.assign({}, decision, { remaining: Math.max(0, decision.remaining - liveUnits(lease, now())) })
      maybeRefill(lease, limit, take, background)
      // The leased units are this isolate's to spend: what the client may still use includes them.
      return extra > 0 ? Object.assign({}, decision, { remaining: decision.remaining + extra }) : decision
    }
    lease.units += held
    lease.last = decision
    return decision
  }

  return {
    requests: (keyId, rpm, opts) =>
      spend(`r|${keyId}|${rpm}`, rpm, opts?.units ?? 1, async (units) => exact.requests(keyId, rpm, { units }), opts?.background),
    tokens: (keyId, tpm, cost, opts) =>
      spend(`t|${keyId}|${tpm}`, tpm, cost, async (units) => exact.tokens(keyId, tpm, units), opts?.background),
    async refund(keyId, tpm, cost) {
      // A live lease takes the tokens back (they are still counted as spent in Redis, and will be
      // spent here within the lease period); otherwise Redis gets them back.
      const lease = leases.get(`t|${keyId}|${tpm}`)
      if (lease && now() < lease.expiresAtMs) {
        lease.units += cost
        return
      }
      await exact.refund(keyId, tpm, cost)
    },
    peekTokens(keyId, tpm) {
      // What a charge would be told: Redis's last answer plus the unspent lease, without I/O while
      // the lease is live; otherwise Redis's own figures.
      const lease = leases.get(`t|${keyId}|${tpm}`)
      const at = now()
      if (lease?.last && at < lease.expiresAtMs) {
        const remaining = Math.max(0, lease.last.remaining + lease.units)
        return { success: remaining > 0, limit: tpm, remaining, resetAtMs: lease.last.resetAtMs }
      }
      return exact.peekTokens(keyId, tpm)
    },
  }
}

/** Unspent units the lease still holds at `at`: the remaining Redis reports already excludes them. */
function liveUnits(lease: Lease, at: number): number {
  return at < lease.expiresAtMs ? lease.units : 0
}
