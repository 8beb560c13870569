import { describe, expect, it } from 'vitest'
import type { ApiKeyRecord } from '../../../shared/src/api-key.ts'
import { KeyCache, NEGATIVE_TTL_MS, POSITIVE_TTL_MS, REFRESH_AHEAD_MS, STALE_IF_ERROR_MS, STALE_RETRY_MS } from './key-cache.ts'

const record: ApiKeyRecord = { id: 'k1', tenant: 't', name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false }

function setup() {
  let t = 0
  const calls: string[] = []
  const table = new Map([['known', record]])
  let failing = false
  const cache = new KeyCache({
    lookup: async (h) => {
      calls.push(h)
      if (failing) throw new Error('down')
      return table.get(h)
    },
  }, () => t)
  return { cache, calls, table, advance: (ms: number) => (t += ms), fail: (v: boolean) => (failing = v) }
}

describe('KeyCache', () => {
  it('keeps a found record for 30 s', async () => {
    const { cache, calls, advance } = setup()
    expect(await cache.lookup('known')).toEqual(record)
    advance(POSITIVE_TTL_MS - 1)
    await cache.lookup('known')
    expect(calls).toHaveLength(1)
    advance(1)
    await cache.lookup('known')
    expect(calls).toHaveLength(2)
  })

  it('fresh() answers a cached record without the store, only while it is fresh', async () => {
    const { cache, calls, advance } = setup()
    expect(cache.fresh('known')).toBeUndefined()
    await cache.lookup('known')
    await cache.lookup('nope')
    expect(cache.fresh('known')).toEqual(record)
    expect(cache.fresh('nope')).toBeUndefined()
    advance(POSITIVE_TTL_MS)
    expect(cache.fresh('known')).toBeUndefined()
    expect(calls).toEqual(['known', 'nope'])
  })

  it('refreshes a record used near its expiry in the background, once at a time, so it never expires under use', async () => {
    const { cache, calls, advance } = setup()
    await cache.lookup('known')
    const work: Promise<unknown>[] = []
    const background = (p: Promise<unknown>) => void work.push(p)
    // Not yet near its expiry: no refresh.
    advance(POSITIVE_TTL_MS - REFRESH_AHEAD_MS - 1)
    expect(cache.fresh('known', background)).toEqual(record)
    expect(work).toHaveLength(0)
    // Inside the last REFRESH_AHEAD_MS: answered at once, one refresh started (not one per use).
    advance(2)
    expect(cache.fresh('known', background)).toEqual(record)
    expect(cache.fresh('known', background)).toEqual(record)
    expect(work).toHaveLength(1)
    await Promise.all(work)
    expect(calls).toEqual(['known', 'known'])
    // Past the first lookup's 30 s the refreshed entry still answers without the store.
    advance(REFRESH_AHEAD_MS)
    expect(cache.fresh('known', background)).toEqual(record)
    expect(calls).toHaveLength(2)
  })

  it('control: a record not used near its expiry is not refreshed, and expires at 30 s', async () => {
    const { cache, calls, advance } = setup()
    await cache.lookup('known')
    advance(POSITIVE_TTL_MS)
    expect(cache.fresh('known', () => {})).toBeUndefined()
    expect(calls).toHaveLength(1)
  })

  it('a refresh sees a revoked key: it is refused from then on, within the 30 s', async () => {
    const { cache, table, advance } = setup()
    await cache.lookup('known')
    table.delete('known')
    const work: Promise<unknown>[] = []
    advance(POSITIVE_TTL_MS - REFRESH_AHEAD_MS + 1)
    expect(cache.fresh('known', (p) => void work.push(p))).toEqual(record)
    await Promise.all(work)
    expect(cache.fresh('known')).toBeUndefined()
    expect(await cache.lookup('known')).toBeUndefined()
  })

  it('a failed refresh changes nothing: the entry answers until it expires, then the lookup decides', async () => {
    const { cache, calls, advance, fail } = setup()
    await cache.lookup('known')
    const work: Promise<unknown>[] = []
    advance(POSITIVE_TTL_MS - REFRESH_AHEAD_MS + 1)
    fail(true)
    expect(cache.fresh('known', (p) => void work.push(p))).toEqual(record)
    await Promise.all(work)
    expect(cache.fresh('known')).toEqual(record)
    advance(REFRESH_AHEAD_MS)
    expect(cache.fresh('known')).toBeUndefined()
    fail(false)
    expect(await cache.lookup('known')).toEqual(record)
    expect(calls).toHaveLength(3)
  })

  it('keeps a miss for 5 s', async () => {
    const { cache, calls, advance } = setup()
    expect(await cache.lookup('nope')).toBeUndefined()
    advance(NEGATIVE_TTL_MS - 1)
    await cache.lookup('nope')
    expect(calls).toHaveLength(1)
    advance(1)
    await cache.lookup('nope')
    expect(calls).toHaveLength(2)
  })

  it('answers with an expired entry while the store fails, within the stale window only', async () => {
    const { cache, calls, advance, fail } = setup()
    expect(await cache.lookup('known')).toEqual(record)
    expect(await cache.lookup('nope')).toBeUndefined()
    advance(POSITIVE_TTL_MS)
    fail(true)
    // The store is asked (and fails); the last answers stand in: the known key, the refused one.
    expect(await cache.lookup('known')).toEqual(record)
    expect(await cache.lookup('nope')).toBeUndefined()
    expect(calls).toEqual(['known', 'nope', 'known', 'nope'])
    expect(cache.staleAnswers).toBe(2)
    // For STALE_RETRY_MS the stale answer stands without asking the failing store again.
    advance(STALE_RETRY_MS - 1)
    expect(await cache.lookup('known')).toEqual(record)
    expect(calls).toHaveLength(4)
    advance(1)
    expect(await cache.lookup('known')).toEqual(record)
    expect(calls).toHaveLength(5)
    // Once the store answers again, its answer is the one kept.
    fail(false)
    advance(STALE_RETRY_MS)
    expect(await cache.lookup('known')).toEqual(record)
    expect(calls).toHaveLength(6)
    // Past the stale window of the fresh entry, a failing store is a failure again.
    advance(POSITIVE_TTL_MS + STALE_IF_ERROR_MS)
    fail(true)
    await expect(cache.lookup('known')).rejects.toThrow('down')
  })

  it('keeps asking a failing store at most every STALE_RETRY_MS, and never past the stale window', async () => {
    const { cache, calls, advance, fail } = setup()
    await cache.lookup('known')
    fail(true)
    advance(POSITIVE_TTL_MS)
    // One request a second through the whole stale window: every one is answered, and the store
    // is asked once per STALE_RETRY_MS, not once per request.
    let served = 0
    for (let i = 0; i < STALE_IF_ERROR_MS / 1000; i++) {
      if ((await cache.lookup('known').catch(() => undefined)) !== undefined) served++
      advance(1000)
    }
    expect(served).toBe(STALE_IF_ERROR_MS / 1000)
    expect(calls.length).toBeLessThanOrEqual(1 + STALE_IF_ERROR_MS / STALE_RETRY_MS + 1)
    await expect(cache.lookup('known')).rejects.toThrow('down')
  })

  it('does not cache a store failure', async () => {
    const { cache, calls, fail } = setup()
    fail(true)
    await expect(cache.lookup('known')).rejects.toThrow('down')
    fail(false)
    expect(await cache.lookup('known')).toEqual(record)
    expect(calls).toHaveLength(2)
  })
})
