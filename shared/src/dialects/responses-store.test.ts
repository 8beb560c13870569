import { describe, expect, it } from 'vitest'
import { useLocalUpstashRedis } from '../../test/support/local-upstash-redis.ts'
import { ResponsesStore, type StoredResponse } from './responses-store.ts'

/** The store's scripts through the real @upstash/redis client, the local bridge and a real redis-server. */
const local = useLocalUpstashRedis()

const record = (text: string): StoredResponse => ({ response: { id: 'x', output: [{ type: 'message', content: [{ type: 'output_text', text }] }] }, input: [{ id: 'msg_1', type: 'message', role: 'user', content: [{ type: 'input_text', text }] }] })

describe('ResponsesStore over Upstash REST', () => {
  it('keeps, reads and deletes a response for its tenant only', async () => {
    const store = new ResponsesStore(local.redis, { ttlMs: 60_000, maxBytesPerTenant: 1 << 20 })
    await store.save('t1', 'resp_a', record('hello'))
    expect(await store.load('t1', 'resp_a')).toEqual(record('hello'))
    // Another tenant, and a tenant whose name would spell t1's keys, see nothing.
    expect(await store.load('t2', 'resp_a')).toBeUndefined()
    expect(await store.load('t1:resp_a', '')).toBeUndefined()
    expect(await store.delete('t2', 'resp_a')).toBe(false)
    expect(await store.delete('t1', 'resp_a')).toBe(true)
    expect(await store.load('t1', 'resp_a')).toBeUndefined()
    expect(await store.delete('t1', 'resp_a')).toBe(false)
    // Its accounting went with it.
    expect(await local.redis.hget('zl:resp-size:t1', '#total')).toBe(0)
  })

  it('a tenant over its byte bound loses its oldest responses first, never the one being written', async () => {
    const one = JSON.stringify(record('x'.repeat(100))).length
    const store = new ResponsesStore(local.redis, { ttlMs: 60_000, maxBytesPerTenant: one * 3 })
    for (const [i, id] of ['resp_1', 'resp_2', 'resp_3', 'resp_4'].entries()) await store.save('bounded', id, record('x'.repeat(100)), 1000 + i)
    expect(await store.load('bounded', 'resp_1')).toBeUndefined()
    for (const id of ['resp_2', 'resp_3', 'resp_4']) expect(await store.load('bounded', id)).toBeDefined()
    expect(await local.redis.hget('zl:resp-size:bounded', '#total')).toBe(one * 3)
    // Writing the same id again replaces it: counted once.
    await store.save('bounded', 'resp_4', record('x'.repeat(100)), 2000)
    expect(await local.redis.zcard('zl:resp-idx:bounded')).toBe(3)
    expect(await local.redis.hget('zl:resp-size:bounded', '#total')).toBe(one * 3)
    // Other tenants are not touched by this tenant's bound.
    await store.save('other', 'resp_1', record('y'))
    const big = new ResponsesStore(local.redis, { ttlMs: 60_000, maxBytesPerTenant: one })
    await big.save('bounded', 'resp_5', record('x'.repeat(1000)), 3000)
    expect(await big.load('bounded', 'resp_5')).toBeDefined()
    expect(await local.redis.zcard('zl:resp-idx:bounded')).toBe(1)
    expect(await store.load('other', 'resp_1')).toBeDefined()
  })

  it('a record expires with its TTL; a malformed id is no stored id', async () => {
    const store = new ResponsesStore(local.redis, { ttlMs: 60_000, maxBytesPerTenant: 1 << 20 })
    await store.save('ttl', 'resp_t', record('a'))
    const ttl = await local.redis.pttl('zl:resp:ttl:resp_t')
    expect(ttl).toBeGreaterThan(50_000)
    expect(ttl).toBeLessThanOrEqual(60_000)
    expect(await local.redis.pttl('zl:resp-idx:ttl')).toBeGreaterThan(50_000)
    expect(await store.load('ttl', 'resp_a b')).toBeUndefined()
    expect(await store.load('ttl', 'chatcmpl-1')).toBeUndefined()
  })
})
