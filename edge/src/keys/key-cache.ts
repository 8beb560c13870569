/**
 * Per-isolate cache in front of a KeyStore (DESIGN.md §3): a found record is kept 30 s, a miss
 * 5 s, so a hot key costs no Redis round trip and a scan of bad keys costs one per 5 s each.
 * A revoked or disabled key therefore takes effect within 30 s. Store failures are not cached.
 */
import type { ApiKeyRecord } from '../../../shared/src/api-key.ts'
import type { KeyStore } from './key-store.ts'

export const POSITIVE_TTL_MS = 30_000
export const NEGATIVE_TTL_MS = 5_000
/** Bounds memory under a flood of random keys (each miss is cached). */
const MAX_ENTRIES = 10_000

interface Entry {
  record: ApiKeyRecord | undefined
  expiresAtMs: number
}

export class KeyCache {
  private readonly entries = new Map<string, Entry>()

  constructor(
    private readonly store: KeyStore,
    private readonly now: () => number = Date.now,
  ) {}

  async lookup(hashHex: string): Promise<ApiKeyRecord | undefined> {
    const t = this.now()
    const hit = this.entries.get(hashHex)
    if (hit && hit.expiresAtMs > t) return hit.record
    const record = await this.store.lookup(hashHex)
    if (this.entries.size >= MAX_ENTRIES) this.evictExpired(t)
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear()
    this.entries.set(hashHex, { record, expiresAtMs: t + (record ? POSITIVE_TTL_MS : NEGATIVE_TTL_MS) })
    return record
  }

  private evictExpired(t: number): void {
    for (const [k, e] of this.entries) if (e.expiresAtMs <= t) this.entries.delete(k)
  }
}
