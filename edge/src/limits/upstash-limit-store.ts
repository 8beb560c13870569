/**
 * The LimitStore on Upstash Redis with @upstash/ratelimit (one Lua script per decision, atomic in
 * Redis, so concurrent edges and isolates share exact budgets):
 * - requests/minute: sliding window of 60 s (a refused request is not counted);
 * - tokens/minute: token bucket holding `tpm`, refilled by tpm/60 each second. Unlike the window
 *   algorithms, it refuses a weighted charge that does not fit without keeping it, so only
 *   requests refused *after* the charge need a refund (a negative rate adds the tokens back).
 * Options fixed for the edge: no ephemeral cache (it would keep refusing after a refund), no
 * analytics, no deny-list protection (it fetches a list from the internet), and no library
 * timeout (its fail-open would bypass RATE_LIMIT_FAILURE_MODE; rate-limiter.ts bounds the time).
 *
 * With `readAlong`, a token-bucket call also carries the reads requests asked for alongside
 * their charge (redis/read-along.ts: the affinity memory's GET), in the same pipeline.
 */
import { Ratelimit } from '@upstash/ratelimit'
import { carryingReads, type ReadAlongSource, type ScriptRedis } from '../redis/read-along.ts'
import type { LimitStore } from './rate-limiter.ts'
import type { LimitDecision } from '../context.ts'

/** Ratelimit's redis parameter: any @upstash/redis client (Node or Cloudflare build). */
export type UpstashRedis = ConstructorParameters<typeof Ratelimit>[0]['redis']

export const REQUESTS_PREFIX = 'zl:rl:req'
export const TOKENS_PREFIX = 'zl:rl:tok'

export interface UpstashLimitStoreOptions {
  /** Reads to carry on each API key's tokens/min calls (the client must then also pipeline). */
  readAlong?: ReadAlongSource
}

/** The API key whose token bucket a script's keys name (@upstash/ratelimit keys it `<prefix>:<identifier>`). */
export function tokenBucketKeyId(scriptKeys: readonly string[]): string | undefined {
  const first = scriptKeys[0]
  return first?.startsWith(`${TOKENS_PREFIX}:`) ? first.slice(TOKENS_PREFIX.length + 1) : undefined
}

export function createUpstashLimitStore(redis: UpstashRedis, options: UpstashLimitStoreOptions = {}): LimitStore {
  const tokenRedis = options.readAlong ? carryingReads(redis as UpstashRedis & ScriptRedis, options.readAlong, tokenBucketKeyId) : redis
  // Limits differ per key, the Redis keys do not: one Ratelimit per distinct limit value.
  const requestLimiters = new Map<number, Ratelimit>()
  const tokenLimiters = new Map<number, Ratelimit>()
  const make = (client: UpstashRedis, prefix: string, limiter: ConstructorParameters<typeof Ratelimit>[0]['limiter']) =>
    new Ratelimit({ redis: client, limiter, prefix, ephemeralCache: false, analytics: false, timeout: 0, enableProtection: false })

  const forRequests = (rpm: number) => memo(requestLimiters, rpm, () => make(redis, REQUESTS_PREFIX, Ratelimit.slidingWindow(rpm, '60 s')))
  const forTokens = (tpm: number) => memo(tokenLimiters, tpm, () => make(tokenRedis, TOKENS_PREFIX, Ratelimit.tokenBucket(tpm / 60, '1 s', tpm)))

  return {
    async requests(keyId, rpm, opts) {
      const units = opts?.units ?? 1
      return toDecision(await forRequests(rpm).limit(keyId, units === 1 ? undefined : { rate: units }))
    },
    async tokens(keyId, tpm, cost) {
      const limiter = forTokens(tpm)
      const decision = toDecision(await limiter.limit(keyId, { rate: cost }))
      if (decision.success) return decision
      // A refusal reports 0 left and the next refill (≤ 1 s away). A request short by more than
      // one refill (tpm/60 tokens) must wait for several: read what is left and say the real wait.
      const { remaining } = await limiter.getRemaining(keyId)
      const refills = Math.max(1, Math.ceil((cost - Math.max(0, remaining)) / (tpm / 60)))
      return Object.assign({}, decision, { remaining: Math.max(0, Math.floor(remaining)), resetAtMs: decision.resetAtMs + (refills - 1) * 1000 })
    },
    async refund(keyId, tpm, cost) {
      await forTokens(tpm).limit(keyId, { rate: -cost })
    },
    async peekTokens(keyId, tpm) {
      // A read (the library's getRemaining script), never a charge. The bucket is refilled lazily,
      // on its next charge: its stored tokens are as of its last refill, so the refills due since
      // are added here, as the next charge would.
      const { remaining, reset } = await forTokens(tpm).getRemaining(keyId)
      const due = Math.max(0, Math.floor((Date.now() - reset) / 1000) + 1)
      const left = Math.min(tpm, Math.max(0, Math.floor(remaining + due * (tpm / 60))))
      return { success: left > 0, limit: tpm, remaining: left, resetAtMs: reset + due * 1000 }
    },
  }
}

interface RatelimitResult {
  success: boolean
  limit: number
  remaining: number
  reset: number
  pending: Promise<unknown>
}

function toDecision(r: RatelimitResult): LimitDecision {
  // With analytics off and one region, `pending` is already settled: nothing to hand to waitUntil.
  void r.pending.catch(() => {})
  return { success: r.success, limit: r.limit, remaining: Math.max(0, Math.floor(r.remaining)), resetAtMs: r.reset }
}

function memo<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let v = map.get(key)
  if (v === undefined) {
    if (map.size >= 256) map.clear()
    v = make()
    map.set(key, v)
  }
  return v
}
