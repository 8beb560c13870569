/**
 * Failover picks the next-nearest region: us-east's node is dead, eu-west sits 70 ms
 * away and ap-south 190 ms away, each behind infra/local/wan-relay.ts, and every us-east request
 * of 5 bursts of 9 must go to eu-west. Three real node servers (gpu-node/src/server with a
 * scripted engine) behind the relays, the Node edge in us-east; this test writes the nodes'
 * heartbeat rows itself, so eu-west can be held in the state it publishes right after a region's
 * load moved onto it: one prompt prefilling, eight queued behind the prefill chunk with 31 batch
 * slots free, almost nothing generated yet. The queue estimate used to divide those eight by the
 * generated tokens/s (seconds of "queue") and sent the burst on to ap-south; this fails with it.
 * The control: the same edge once eu-west's batch is really full sends us-east clients to
 * ap-south, at ap-south's round trip — the test sees a far pick when there is one.
 */
import { performance } from 'node:perf_hooks'
import { Redis } from '@upstash/redis'
import { Agent } from 'undici'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { startWanRelay, type WanRelay } from '../../../infra/local/wan-relay.ts'
import { startTestNode, TEST_SECRET, type TestNode } from '../../../gpu-node/test/support/test-node.ts'
import { TEST_MODEL_ID } from '../../../gpu-node/test/support/scripted-engine.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { NODES_KEY, type NodeRow } from '../../../shared/src/node-row.ts'
import { parseEdgeConfig } from '../../src/config.ts'
import { startNodeEdge, type NodeEdge } from '../../src/entries/node-server.ts'
import { timedChat } from './timed-chat.ts'

const REGIONS = {
  'us-east': { lat: 39.0, lon: -77.5, rttMs: 0 },
  'eu-west': { lat: 53.3, lon: -6.3, rttMs: 70 },
  'ap-south': { lat: 19.1, lon: 72.9, rttMs: 190 },
} as const
type Region = keyof typeof REGIONS
const REGION_NAMES = Object.keys(REGIONS) as Region[]
/** How often this test beats for the nodes (the nodes' own interval is 1 s). */
const BEAT_MS = 250
const IDLE = { maxBatch: 32, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 0, prefillTokPerSec: 20_000 }
/** eu-west right after us-east's burst moved onto it (see above). */
const TAKING_THE_BURST = { ...IDLE, running: 1, waiting: 8, tokPerSec: 20 }
/** The control: every slot busy and 8 more waiting for one, ~340 ms of queue at 3000 tok/s. */
const REALLY_FULL = { ...IDLE, running: 32, waiting: 8, tokPerSec: 3000 }

let upstash: LocalUpstash
let redis: Redis
const nodes: Partial<Record<Region, TestNode>> = {}
const relays: Partial<Record<Region, WanRelay>> = {}
let edge: NodeEdge
let key: string
let beat: NodeJS.Timeout | undefined
let euWestState: typeof IDLE = TAKING_THE_BURST
const client = new Agent({ keepAliveTimeout: 60_000 })

/** One heartbeat for every node, the dead one included: a SIGKILLed node's row stays fresh for up to 5 s, and the edge learns of it by failing. */
async function beatAll(): Promise<void> {
  const rows: Record<string, string> = {}
  for (const id of REGION_NAMES) {
    const r = REGIONS[id]
    const row: NodeRow = { id, url: relays[id]!.url, region: id, lat: r.lat, lon: r.lon, models: [TEST_MODEL_ID], ...(id === 'eu-west' ? euWestState : IDLE), draining: false, ts: Date.now() }
    rows[id] = JSON.stringify(row)
  }
  await redis.hset(NODES_KEY, rows)
}

beforeAll(async () => {
  upstash = await startLocalUpstash()
  redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false })
  for (const id of REGION_NAMES) {
    nodes[id] = await startTestNode({ secret: TEST_SECRET })
    relays[id] = await startWanRelay({ target: { host: '127.0.0.1', port: nodes[id]!.port }, rttMs: REGIONS[id].rttMs })
  }
  await beatAll()
  beat = setInterval(() => void beatAll().catch(() => {}), BEAT_MS)
  const config = parseEdgeConfig({
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: TEST_SECRET,
    GPU_NODES: JSON.stringify(REGION_NAMES.map((id) => ({ id, url: relays[id]!.url, region: id, lat: REGIONS[id].lat, lon: REGIONS[id].lon, models: [TEST_MODEL_ID] }))),
    EDGE_LAT: String(REGIONS['us-east'].lat),
    EDGE_LON: String(REGIONS['us-east'].lon),
    DEV_MODE: '1',
    REQUEST_LOG: '0',
    DEFAULT_RPM: '1000000',
    DEFAULT_TPM: '1000000000',
  })
  key = generateApiKey()
  await redis.hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: 'failover-wan', tenant: 'test', name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false }))
  edge = await startNodeEdge(config, { host: '127.0.0.1', port: 0 })
})

afterAll(async () => {
  clearInterval(beat)
  await edge?.close()
  await client.close()
  await Promise.all(Object.values(relays).map((r) => r.close()))
  await Promise.all(Object.values(nodes).map((n) => n.close()))
  await upstash?.stop()
})

/** A chat request from a client in us-east, each with its own conversation; resolves with the serving region and the time to its first body byte. */
async function askFromUsEast(i: number): Promise<{ region: string; ttfbMs: number }> {
  const r = REGIONS['us-east']
  const res = await timedChat(edge.url, { dispatcher: client, key, geo: r, body: JSON.stringify({ model: TEST_MODEL_ID, messages: [{ role: 'user', content: `conversation ${i}` }], max_tokens: 4, stream: true }) })
  expect(res.status, res.text).toBe(200)
  return { region: res.region, ttfbMs: res.ttfbMs }
}

async function bursts(count: number, size: number): Promise<Array<{ region: string; ttfbMs: number }>> {
  const out: Array<{ region: string; ttfbMs: number }> = []
  for (let b = 0; b < count; b++) out.push(...(await Promise.all(Array.from({ length: size }, (_, i) => askFromUsEast(b * size + i)))))
  return out
}

const tally = (xs: Array<{ region: string }>) => xs.reduce<Record<string, number>>((m, x) => ({ ...m, [x.region]: (m[x.region] ?? 0) + 1 }), {})

describe('failover across a WAN', () => {
  it('sends every us-east request of 5 bursts of 9 to eu-west (70 ms), none to ap-south (190 ms), while eu-west takes the burst', async () => {
    await edge.warmed
    // The region outage: us-east's node is gone, its row still fresh.
    await nodes['us-east']!.close()
    const answers = await bursts(5, 9)
    expect(tally(answers)).toEqual({ 'eu-west': 45 })
    // Served across the 70 ms link, not the 190 ms one.
    for (const a of answers) expect(a.ttfbMs).toBeGreaterThanOrEqual(REGIONS['eu-west'].rttMs)
  })

  it('the control: once eu-west\'s batch is really full, us-east clients are sent to ap-south at its round trip', async () => {
    euWestState = REALLY_FULL
    // Bounded: the edge's table refreshes every second.
    const deadline = performance.now() + 10_000
    while ((await askFromUsEast(-1)).region !== 'ap-south') expect(performance.now()).toBeLessThan(deadline)
    const answers = await bursts(1, 9)
    expect(tally(answers)).toEqual({ 'ap-south': 9 })
    for (const a of answers) expect(a.ttfbMs).toBeGreaterThanOrEqual(REGIONS['ap-south'].rttMs)
  })
})
