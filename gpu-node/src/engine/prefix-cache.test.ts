import { describe, expect, it } from 'vitest'
import { PrefixCache } from './prefix-cache.ts'

const B = 4
const tokens = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i)

function chainOf(cache: PrefixCache, ts: number[]): string[] {
  const chain: string[] = []
  cache.extendChain(chain, ts, ts.length)
  return chain
}

/** Holds the complete blocks of `ts` in order while it can (as the scheduler does when a sequence's KV lands): them, and the fresh ones' slots. */
function holdAll(cache: PrefixCache, ts: number[]) {
  const held = []
  for (const hash of chainOf(cache, ts)) {
    const h = cache.hold(hash)
    if (!h) break
    held.push(h)
  }
  return { blocks: held.map((h) => h.block), fresh: held.filter((h) => h.fresh).map((h) => h.block.slot) }
}

describe('PrefixCache keys', () => {
  it('keys each complete block by the whole prefix before it, never by a block alone', () => {
    const cache = new PrefixCache(B, 16)
    const a = chainOf(cache, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(a).toHaveLength(2) // the 9th token is no complete block
    expect(chainOf(cache, [1, 2, 3, 4, 5, 6, 7, 8])).toEqual(a)
    // The same second block after another first block is another key.
    expect(chainOf(cache, [0, 2, 3, 4, 5, 6, 7, 8])[1]).not.toBe(a[1])
    // Another salt (tenant) keys the same tokens differently.
    const salted: string[] = []
    cache.extendChain(salted, [1, 2, 3, 4, 5, 6, 7, 8], 8, 'tenant-b')
    expect(salted[0]).not.toBe(a[0])
    expect(salted[1]).not.toBe(a[1])
    // Another model's cache keys the same tokens differently.
    expect(chainOf(new PrefixCache(B, 16, 'other-model'), [1, 2, 3, 4])[0]).not.toBe(a[0])
  })

  it('extends a chain incrementally to the same keys as computing it at once', () => {
    const cache = new PrefixCache(B, 16)
    const ts = tokens(13)
    const chain: string[] = []
    for (let n = 0; n <= ts.length; n++) cache.extendChain(chain, ts, n)
    expect(chain).toEqual(chainOf(cache, ts))
  })
})

describe('PrefixCache lookups', () => {
  it('finds the longest cached prefix and always leaves the last prompt token to compute', () => {
    const cache = new PrefixCache(B, 16)
    holdAll(cache, tokens(12))
    expect(cache.peek(chainOf(cache, tokens(12)), 12)).toBe(2) // 3 blocks cached, but token 12 must be computed
    expect(cache.peek(chainOf(cache, tokens(13)), 13)).toBe(3)
    expect(cache.peek(chainOf(cache, [...tokens(6), 99, ...tokens(6, 7)]), 13)).toBe(1) // diverges inside block 2
    const hit = cache.acquire(chainOf(cache, tokens(13)), 13)
    expect(hit.map((b) => b.slot)).toEqual([0, 1, 2])
    expect(cache.stats).toMatchObject({ queries: 13, hits: 12 })
  })
})

describe('PrefixCache eviction', () => {
  it('evicts only blocks no sequence holds, least recently released first, a chain from its end', () => {
    const cache = new PrefixCache(B, 4)
    const a = holdAll(cache, tokens(8)) // 2 blocks, slots 0 1
    const b = holdAll(cache, tokens(8, 100)) // 2 blocks, slots 2 3
    expect([a.fresh, b.fresh]).toEqual([[0, 1], [2, 3]])
    // Full, every block held: nothing can be cached.
    expect(cache.hold(chainOf(cache, tokens(4, 200))[0])).toBeUndefined()
    cache.release(a.blocks)
    cache.release(b.blocks)
    // a was released first, its chain's end first: slot 1, then 0, then b's 3, 2.
    const c = holdAll(cache, tokens(12, 300))
    expect(c.fresh).toEqual([1, 0, 3])
    expect(cache.stats.evictions).toBe(3)
    expect(cache.peek(chainOf(cache, tokens(9)), 9)).toBe(0)
    expect(cache.peek(chainOf(cache, tokens(9, 100)), 9)).toBe(1) // b's first block survives, with no orphan after it
  })

  it('keeps a held block through any pressure and gives a cached block again instead of a copy', () => {
    const cache = new PrefixCache(B, 2)
    const shared = chainOf(cache, tokens(4))[0]
    const first = cache.hold(shared)!
    expect(first.fresh).toBe(true)
    const again = cache.hold(shared)!
    expect(again).toEqual({ block: first.block, fresh: false })
    cache.release([first.block])
    for (let i = 0; i < 5; i++) {
      const h = cache.hold(chainOf(cache, tokens(4, 1000 + 10 * i))[0])
      expect(h?.block.slot).toBe(1) // slot 0 stays: it is still held once
      cache.release([h!.block])
    }
    expect(cache.peek([shared], 5)).toBe(1)
    cache.release([again.block])
    expect(cache.hold(chainOf(cache, tokens(4, 5000))[0])!.block.slot).toBe(1) // LRU: slot 1 released before 0 was
  })

  it('never holds more blocks than its capacity', () => {
    const cache = new PrefixCache(B, 3)
    for (let i = 0; i < 50; i++) cache.release(holdAll(cache, tokens(4 * (1 + (i % 5)), 10_000 * i)).blocks)
    expect(cache.blocks).toBeLessThanOrEqual(3)
  })
})
