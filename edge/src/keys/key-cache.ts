/**
 * Per-isolate cache in front of a KeyStore (DESIGN.md §3): a found record is kept 30 s, a miss
 * 5 s, so a hot key costs no Redis round trip and a scan of bad keys costs one per 5 s each.
 * A revoked or disabled key therefore takes effect within 30 s. Store failures are not cached.
 *
 * Stale if error: when the store fails (an error, or no answer within the client's
 * KEY_LOOKUP_TIMEOUT_MS) for a key this isolate looked up less than STALE_IF_ERROR_MS after its
 * entry expired, the last answer stands in — a known key keeps working, and a bad key stays
 * refused, through a Redis outage. Without it every request that found its key's entry just
 * expired while Redis was slow was answered 503 (a fuzz run through wrangler dev
 * got 503s, after seconds, for bodies that were only ever going to be 400s). After a stale answer
 * the store is asked again only after STALE_RETRY_MS. A revocation can thus take up to
 * STALE_IF_ERROR_MS longer, only while the store is failing.
 *
 * Refresh ahead: a found record used in the last REFRESH_AHEAD_MS of its 30 s is looked up again
 * in the background (one lookup per entry at a time; on Workers through the request's waitUntil),
 * so a busy key's entry never expires under its requests: without it, the burst that found it
 * expired waited a Redis round trip, and on Workers (no shared promise) made one lookup per
 * request. A revocation still takes effect within 30 s (the refresh reads the store).
 */
import type { ApiKeyRecord } from '../../../shared/src/api-key.ts'
import { startedWithin } from '../within.ts'
import type { KeyStore } from './key-store.ts'
import type { Background } from '../context.ts'

export const POSITIVE_TTL_MS = 30_000
export const NEGATIVE_TTL_MS = 5_000
/** How long after expiry an entry may answer for a failing store. */
export const STALE_IF_ERROR_MS = 5 * 60_000
/**
 * After a failed lookup answered stale, how long the entry answers again without asking the
 * store: otherwise, with Redis hanging, every request of a busy key would wait out the lookup's
 * timeout (measured: a 4,000-request fuzz through wrangler dev with the bridge frozen took 256 s
 * instead of ~45 s, each request waiting 1 s for its stale answer).
 */
export const STALE_RETRY_MS = 5_000
/** A found record used this close to its expiry is refreshed in the background. */
export const REFRESH_AHEAD_MS = 10_000
/** After a refresh started, the next one waits this long (a failed one leaves the entry as it was). */
const REFRESH_RETRY_MS = 5_000
/** Bounds memory under a flood of random keys (each miss is cached). */
const MAX_ENTRIES = 10_000

interface Entry {
  record: ApiKeyRecord | undefined
  /** Until then the entry answers without the store. */
  expiresAtMs: number
  /** Until then it may stand in for a failing store (its first expiry + STALE_IF_ERROR_MS). */
  staleUntilMs: number
  /** When its last background refresh started (0: none); a successful one replaces the entry. */
  refreshSinceMs: number
}

export class KeyCache {
  private readonly entries = new Map<string, Entry>()
  /** Lookups answered from an expired entry because the store failed (a metric). */
  staleAnswers = 0

  constructor(
    private readonly store: KeyStore,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The cached record while its entry is fresh; undefined for a miss, an expired entry or a cached
   * "no such key" (ask `lookup`). Near its expiry it starts a refresh, handed to `background`.
   */
  fresh(hashHex: string, background?: Background): ApiKeyRecord | undefined {
    const hit = this.entries.get(hashHex)
    const t = this.now()
    if (!hit || hit.expiresAtMs <= t) return undefined
    if (hit.record && hit.expiresAtMs - t < REFRESH_AHEAD_MS && !startedWithin(hit.refreshSinceMs, t, REFRESH_RETRY_MS)) this.refresh(hashHex, hit, t, background)
    return hit.record
  }

  private refresh(hashHex: string, hit: Entry, t: number, background: Background | undefined): void {
    hit.refreshSinceMs = t
    const work = this.store.lookup(hashHex).then(
      (record) => {
        if (this.entries.get(hashHex) === hit) this.remember(hashHex, record, t)
      },
      // A failed refresh changes nothing (the entry expires, and the lookup then decides, stale if
      // error); its start still holds the next one back for REFRESH_RETRY_MS.
      () => {},
    )
    background?.(work)
  }

  async lookup(hashHex: string): Promise<ApiKeyRecord | undefined> {
    const t = this.now()
    const hit = this.entries.get(hashHex)
    if (hit && hit.expiresAtMs > t) return hit.record
    let record: ApiKeyRecord | undefined
    try {
      record = await this.store.lookup(hashHex)
    } catch (e) {
      if (hit && t < hit.staleUntilMs) {
        this.staleAnswers++
        hit.expiresAtMs = Math.min(this.now() + STALE_RETRY_MS, hit.staleUntilMs)
        return hit.record
      }
      throw e
    }
    this.remember(hashHex, record, t)
    return record
  }

  /** Caches the store's answer, asked at `t`. */
  private remember(hashHex: string, record: ApiKeyRecord | undefined, t: number): void {
    if (this.entries.size >= MAX_ENTRIES) this.evictExpired(t)
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear()
    const expiresAtMs = t + (record ? POSITIVE_TTL_MS : NEGATIVE_TTL_MS)
    this.entries.set(hashHex, { record, expiresAtMs, staleUntilMs: expiresAtMs + STALE_IF_ERROR_MS, refreshSinceMs: 0 })
  }

  private evictExpired(t: number): void {
    // Entries past their stale window serve nothing any more.
    for (const [k, e] of this.entries) if (t >= e.staleUntilMs) this.entries.delete(k)
  }
}
