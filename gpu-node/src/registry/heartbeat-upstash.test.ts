import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { createUpstashRegistryClient, NODES_KEY, startHeartbeat } from './heartbeat.ts'

/** The heartbeat through the real @upstash/redis client, the local bridge and a real redis-server. */
let upstash: LocalUpstash
beforeAll(async () => {
  upstash = await startLocalUpstash()
})
afterAll(async () => {
  await upstash?.stop()
})

const silent = { info() {}, warn() {}, error() {} }

describe('registry heartbeat over Upstash REST', () => {
  it('writes a fresh row every beat and removes it on stop', async () => {
    const reader = new Redis({ url: upstash.restUrl, token: upstash.restToken })
    const stats = { running: 2, waiting: 1, maxBatch: 32, kvUsedFrac: 0.25, tokPerSec: 120, prefillTokPerSec: 2000, draining: false }
    const hb = startHeartbeat({
      client: createUpstashRegistryClient(upstash.restUrl, upstash.restToken),
      node: { id: 'n-us', url: 'http://127.0.0.1:9101', region: 'us-east', lat: 39, lon: -77.5, models: ['tiny'] },
      stats: () => stats,
      isDraining: () => false,
      log: silent,
      intervalMs: 50,
    })
    await hb.beat()
    const rows = await reader.hgetall<Record<string, { ts: number; region: string; running: number; models: string[] }>>(NODES_KEY)
    expect(rows?.['n-us']).toMatchObject({ region: 'us-east', running: 2, models: ['tiny'] })
    expect(Date.now() - rows!['n-us'].ts).toBeLessThan(5000)
    await hb.stop()
    expect(await reader.hget(NODES_KEY, 'n-us')).toBeNull()
  })
})
