/**
 * Where each affinity key was last served. The edge is stateless across isolates (Workers), so
 * the memory is Redis — `zl:aff:<hash>` → `{ region, node, at }` with a TTL (AFFINITY_TTL_MS,
 * default 15 min: about as long as a node's prefix cache keeps a quiet conversation) — with a
 * per-isolate copy in front of it:
 *
 * - read: never a round trip of its own. The request asks for its key to ride along with its
 *   tokens/min call (redis/read-along.ts); the value lands here via `learn` before the charge is
 *   decided, and `recall` is a Map lookup. Without that call (a lease served the charge, or the
 *   limiter degraded) the isolate's own copy is all there is.
 * - write: after the node's response has started, in the background (waitUntil on Workers, the
 *   Node entry's tracked set), never in front of the stream. Skipped when this isolate already
 *   knows the same placement written less than half a TTL ago, so a busy conversation costs one
 *   SET per half TTL, not one per turn.
 *
 * Values are routing hints: a lost write or a stale read costs a cache miss, never a wrong answer.
 */
import { z } from 'zod'
import { redisJson } from '../../../shared/src/redis-json.ts'
import type { Background } from '../context.ts'
import type { Placement } from './affinity-route.ts'

export const AFFINITY_KEY_PREFIX = 'zl:aff:'
/** Placements this isolate keeps (least recently learned dropped first): ~100 bytes each. */
export const MAX_LOCAL_PLACEMENTS = 10_000

export function affinityRedisKey(hash: string): string {
  return AFFINITY_KEY_PREFIX + hash
}

/** The stored value (redis-json.ts: parsed by @upstash/redis, or a raw client's string). */
const StoredPlacement = redisJson(z.object({ region: z.string().min(1), node: z.string().min(1), at: z.number().finite() }))

export interface AffinityMemory {
  /** Where `hash` was last served, as this isolate knows it now (no I/O). */
  recall(hash: string): Placement | undefined
  /** After a node answered: remember it here and (in the background) in Redis. */
  remember(hash: string, where: { region: string; node: string }, background: Background): void
  /** A value read from Redis along with another call (null when the key had none). */
  learn(redisKey: string, value: unknown): void
}

/** The one command the memory writes with; @upstash/redis satisfies it. */
export interface AffinityRedis {
  set(key: string, value: string, opts: { px: number }): Promise<unknown>
}

export interface AffinityMemoryOptions {
  ttlMs: number
  /** Without one (tests, an app built without Redis) the memory is this isolate's only. */
  redis?: AffinityRedis
  now?: () => number
  maxEntries?: number
}

export function createAffinityMemory(opts: AffinityMemoryOptions): AffinityMemory {
  const now = opts.now ?? Date.now
  const maxEntries = opts.maxEntries ?? MAX_LOCAL_PLACEMENTS
  const local = new Map<string, Placement>()

  const keep = (hash: string, placement: Placement) => {
    // Re-inserted, so Map order is "least recently learned first".
    local.delete(hash)
    local.set(hash, placement)
    if (local.size > maxEntries) local.delete(local.keys().next().value!)
  }

  const recall = (hash: string): Placement | undefined => {
    const p = local.get(hash)
    if (p && now() - p.atMs >= opts.ttlMs) {
      local.delete(hash)
      return undefined
    }
    return p
  }

  return {
    recall,
    remember(hash, where, background) {
      const known = recall(hash)
      const t = now()
      if (known && known.region === where.region && known.node === where.node && t - known.atMs < opts.ttlMs / 2) return
      keep(hash, { region: where.region, node: where.node, atMs: t })
      if (opts.redis) background(opts.redis.set(affinityRedisKey(hash), JSON.stringify({ region: where.region, node: where.node, at: t }), { px: opts.ttlMs }))
    },
    learn(redisKey, value) {
      if (!redisKey.startsWith(AFFINITY_KEY_PREFIX) || value === null || value === undefined) return
      const parsed = StoredPlacement.safeParse(value)
      if (!parsed.success) return
      const hash = redisKey.slice(AFFINITY_KEY_PREFIX.length)
      const placement: Placement = { region: parsed.data.region, node: parsed.data.node, atMs: parsed.data.at }
      if (now() - placement.atMs >= opts.ttlMs) return
      // Another isolate may have moved the conversation since this one last saw it: the newer wins.
      const known = recall(hash)
      if (!known || known.atMs < placement.atMs) keep(hash, placement)
    },
  }
}
