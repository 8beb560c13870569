import { describe, expect, it } from 'vitest'
import { useLocalUpstashRedis } from '../../../shared/test/support/local-upstash-redis.ts'
import { createSupersedeLedger, ledgerKey, noticeFor } from './supersede-ledger.ts'

/** The ledger's script through the real @upstash/redis client, the local bridge and a real redis-server. */
const local = useLocalUpstashRedis()

describe('noticeFor', () => {
  it('names the other node for an older request there, this node for a newer one there, nobody on the same node', () => {
    expect(noticeFor(undefined, 'b', 2000)).toBeUndefined()
    expect(noticeFor('a 1000', 'b', 2000)).toEqual({ node: 'a', before: 2000 })
    expect(noticeFor('a 3000', 'b', 2000)).toEqual({ node: 'b', before: 3000 })
    expect(noticeFor('b 1000', 'b', 2000)).toBeUndefined()
    expect(noticeFor('garbage', 'b', 2000)).toBeUndefined()
  })
})

describe('the supersede ledger over Upstash REST', () => {
  it('keeps the newest request of a group and says which node must hear of it', async () => {
    const ledger = createSupersedeLedger(local.redis)
    expect(await ledger.record('acme', 'doc', 'node-a', 1000)).toBeUndefined()
    expect(await ledger.record('acme', 'doc', 'node-a', 1100)).toBeUndefined()
    // A newer request elsewhere: node-a must end what it received before 1200.
    expect(await ledger.record('acme', 'doc', 'node-b', 1200)).toEqual({ node: 'node-a', before: 1200 })
    // A request received earlier that was recorded late: its own node ends it; the record stays the newer one.
    expect(await ledger.record('acme', 'doc', 'node-c', 1150)).toEqual({ node: 'node-c', before: 1200 })
    expect(await local.redis.get(ledgerKey('acme', 'doc'))).toBe('node-b 1200')
    expect(await local.redis.pttl(ledgerKey('acme', 'doc'))).toBeGreaterThan(0)
  })

  it('keeps tenants and keys apart', async () => {
    const ledger = createSupersedeLedger(local.redis)
    await ledger.record('t1', 'k', 'node-a', 1000)
    expect(await ledger.record('t2', 'k', 'node-b', 2000)).toBeUndefined()
    expect(await ledger.record('t1', 'k2', 'node-b', 2000)).toBeUndefined()
    expect(ledgerKey('t1', 'k')).not.toBe(ledgerKey('t1k', ''))
  })
})
