/**
 * A request the Node edge serves one region away costs its round trip and no more.
 * Two nodes (the real node server, gpu-node/src/server, with a scripted engine) — us-east beside
 * the edge, eu-west behind infra/local/wan-relay.ts at RTT 80 ms (us-east behind an RTT-0 relay, so
 * both paths have the same hops); the client's location picks the region. Proven here:
 * - the edge has its connection to the far node open before the first request needs it;
 * - p50 TTFB(eu-west) − p50 TTFB(us-east) stays within RTT + SLACK_MS, for a small body and for
 *   a 200 kB one (more than HTTP/2's default 64 KiB window);
 * - the measurement would catch one extra round trip: the same edge with a fresh upstream
 *   connection per request (the control, a test double below) pays about one more RTT.
 */
import { Redis } from '@upstash/redis'
import { Agent } from 'undici'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { startWanRelay, type WanRelay } from '../../../infra/local/wan-relay.ts'
import { startTestNode, TEST_SECRET, type TestNode } from '../../../gpu-node/test/support/test-node.ts'
import { TEST_MODEL_ID } from '../../../gpu-node/test/support/scripted-engine.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { parseEdgeConfig, type EdgeConfig } from '../../src/config.ts'
import { startNodeEdge, type NodeEdge } from '../../src/entries/node-server.ts'
import type { UpstreamFetch } from '../../src/proxy/upstream-fetch.ts'
import { createH2Upstream } from '../../src/proxy/h2-upstream.ts'
import type { EdgeUpstream } from '../../src/proxy/upstream-common.ts'
import { timedChat } from './timed-chat.ts'

const RTT_MS = 80
/** What a loaded 2-core machine may add to a median, ms; one extra round trip is RTT_MS. */
const SLACK_MS = 20
const SAMPLES = 7
const REGIONS = {
  'us-east': { lat: 39.0, lon: -77.5, rttMs: 0 },
  'eu-west': { lat: 53.3, lon: -6.3, rttMs: RTT_MS },
} as const
type Region = keyof typeof REGIONS

let upstash: LocalUpstash
const nodes: TestNode[] = []
const relays: Partial<Record<Region, WanRelay>> = {}
let config: EdgeConfig
let edge: NodeEdge
let control: NodeEdge
const controlUpstreams: EdgeUpstream[] = []
let key: string
const client = new Agent({ keepAliveTimeout: 60_000 })

beforeAll(async () => {
  upstash = await startLocalUpstash()
  const gpuNodes = []
  for (const [id, r] of Object.entries(REGIONS) as Array<[Region, (typeof REGIONS)[Region]]>) {
    const node = await startTestNode({ secret: TEST_SECRET })
    nodes.push(node)
    const relay = await startWanRelay({ target: { host: '127.0.0.1', port: node.port }, rttMs: r.rttMs })
    relays[id] = relay
    gpuNodes.push({ id, url: relay.url, region: id, lat: r.lat, lon: r.lon, models: [TEST_MODEL_ID] })
  }
  config = parseEdgeConfig({
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: TEST_SECRET,
    GPU_NODES: JSON.stringify(gpuNodes),
    EDGE_LAT: String(REGIONS['us-east'].lat),
    EDGE_LON: String(REGIONS['us-east'].lon),
    DEV_MODE: '1',
    AFFINITY: 'off',
    REQUEST_LOG: '0',
    DEFAULT_RPM: '1000000',
    DEFAULT_TPM: '1000000000',
  })
  key = generateApiKey()
  const redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false })
  await redis.hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: 'cross-region', tenant: 'test', name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false }))
  edge = await startNodeEdge(config, { host: '127.0.0.1', port: 0 })
})

afterAll(async () => {
  await edge?.close()
  await control?.close()
  await Promise.all(controlUpstreams.map((u) => u.close()))
  await client.close()
  await Promise.all(Object.values(relays).map((r) => r.close()))
  await Promise.all(nodes.map((n) => n.close()))
  await upstash?.stop()
})

/** A chat stream through `via`, served in `region`; resolves with the time to its first body byte. */
async function ttfb(via: NodeEdge, region: Region, bodyBytes = 0): Promise<number> {
  const r = REGIONS[region]
  let body = JSON.stringify({ model: TEST_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true })
  // Whitespace the edge forwards as is and the node's parser skips: a long prompt's bytes.
  if (bodyBytes > body.length) body = body.slice(0, -1) + ' '.repeat(bodyBytes - body.length) + '}'
  const res = await timedChat(via.url, { dispatcher: client, key, geo: r, body })
  expect(res.status, res.text).toBe(200)
  expect(res.region).toBe(region)
  return res.ttfbMs
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

/** Alternating requests to both regions; p50 TTFB(eu-west) − p50 TTFB(us-east) − RTT. */
async function excessMs(via: NodeEdge, bodyBytes = 0): Promise<number> {
  const t: Record<Region, number[]> = { 'us-east': [], 'eu-west': [] }
  for (let i = 0; i < SAMPLES; i++) {
    for (const region of (i % 2 ? ['us-east', 'eu-west'] : ['eu-west', 'us-east']) as Region[]) t[region].push(await ttfb(via, region, bodyBytes))
  }
  // The link delays what it claims: nothing served there came back within one round trip.
  expect(Math.min(...t['eu-west'])).toBeGreaterThanOrEqual(RTT_MS)
  return median(t['eu-west']) - median(t['us-east']) - RTT_MS
}

/** The edge's own path warm (key cache, limiter scripts, JIT) on local requests only. */
async function warmLocally(via: NodeEdge): Promise<void> {
  for (let i = 0; i < 20; i++) await ttfb(via, 'us-east')
}

describe('cross-region requests through the Node edge', () => {
  it('opens the connection to a far node before any request needs it', async () => {
    await edge.warmed
    expect(relays['eu-west']!.stats().connections).toBe(1)
    expect(edge.upstream.connected()).toContain(relays['eu-west']!.url)
    await warmLocally(edge)
    // So the first request there already pays one round trip, not a handshake on top.
    const first = await ttfb(edge, 'eu-west')
    expect(first).toBeGreaterThanOrEqual(RTT_MS)
    expect(first).toBeLessThan(2 * RTT_MS)
  })

  it('costs its round trip and no more, small body', async () => {
    const excess = await excessMs(edge)
    expect(excess).toBeLessThan(SLACK_MS)
    // Every request rode the connection opened ahead of them.
    expect(relays['eu-west']!.stats().connections).toBe(1)
  })

  it('costs its round trip and no more, 200 kB body (beyond HTTP/2\'s default window)', async () => {
    const excess = await excessMs(edge, 200_000)
    expect(excess).toBeLessThan(SLACK_MS)
  })

  it('would catch one extra round trip: a fresh upstream connection per request pays about one more RTT', async () => {
    // The control: the same edge, but each request dials its node anew.
    const freshConnection: UpstreamFetch = (url, init) => {
      const upstream = createH2Upstream({ connectTimeoutMs: 2000 })
      controlUpstreams.push(upstream)
      return upstream.fetch(url, init)
    }
    control = await startNodeEdge(config, { host: '127.0.0.1', port: 0 }, { overrides: { upstream: freshConnection } })
    await warmLocally(control)
    const excess = await excessMs(control)
    expect(excess).toBeGreaterThan(RTT_MS - SLACK_MS)
  })
})
