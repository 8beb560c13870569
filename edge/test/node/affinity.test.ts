/**
 * Cache-affine routing through the real app (createApp with the Redis-backed deps of the Node
 * entry: redis-server behind the Upstash bridge, the undici REST transport) in front of two
 * stand-in GPU nodes in ONE region, whose heartbeat rows this test writes into `zl:nodes` as
 * real nodes would: each conversation's turns reach one node, different conversations use both,
 * a second edge with an empty memory finds a conversation where the first one served it — with
 * the read riding in its tokens/min call's own round trip — and a draining node loses its
 * conversations. Everything on 127.0.0.1; every wait is on a condition.
 */
import { Redis } from '@upstash/redis'
import type { UpstashRequest, UpstashResponse } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { parseChatCompletionRequest } from '../../../shared/src/dialects/openai-chat.ts'
import { NODES_KEY } from '../../../shared/src/node-row.ts'
import { createApp } from '../../src/app.ts'
import { parseEdgeConfig } from '../../src/config.ts'
import type { LatencySample } from '../../src/latency/latency-recorder.ts'
import { composeEdgeDeps } from '../../src/entries/compose-edge.ts'
import { createUpstashPool, UndiciRedisRequester } from '../../src/redis/undici-redis-requester.ts'
import { affinityKeyOf } from '../../src/routing/affinity-key.ts'
import { withHeadersTimeout } from '../../src/proxy/upstream-fetch.ts'
import { affinityRedisKey } from '../../src/routing/affinity-memory.ts'
import { ringOrder } from '../../src/routing/hash-ring.ts'
import { startStandIn, type Mode, type Received, type StandIn } from '../support/stand-in-node.ts'

const SECRET = 'zl-test-edge-secret-0123456789'
const TENANT = 'affinity-test'
const US_EAST = { lat: 39.0, lon: -77.5 }
const SYSTEM = 'You are a helpful travel agent. Answer in two sentences. '.repeat(8)

let upstash: LocalUpstash
let redis: Redis
let nodes: StandIn[] = []
const script = new Map<string, Record<string, Mode>>()
const received: Received[] = []
/** Heartbeat fields per node id, rewritten into zl:nodes every 250 ms while the test runs. */
const beats = new Map<string, Record<string, unknown>>()
let heartbeat: ReturnType<typeof setInterval> | undefined
let pool: ReturnType<typeof createUpstashPool>

async function writeBeats(): Promise<void> {
  const ts = Date.now()
  const rows: Record<string, string> = {}
  for (const [id, extra] of beats) rows[id] = JSON.stringify({ maxBatch: 32, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 500, draining: false, ...extra, ts })
  await redis.hset(NODES_KEY, rows)
}

beforeAll(async () => {
  upstash = await startLocalUpstash()
  redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false })
  pool = createUpstashPool(upstash.restUrl)
  nodes = await Promise.all(['use-1', 'use-2'].map((id) => startStandIn({ id, secret: SECRET, protocol: 'http1', script, log: received, onChange: () => {} })))
  for (const n of nodes) beats.set(n.id, { id: n.id, url: n.url, region: 'us-east', ...US_EAST, models: ['tiny'], prefixHitRate: n.id === 'use-1' ? 0.5 : undefined, prefillTokPerSec: 4000 })
  await writeBeats()
  heartbeat = setInterval(() => void writeBeats().catch(() => {}), 250)
})

afterAll(async () => {
  if (heartbeat) clearInterval(heartbeat)
  await Promise.all(nodes.map((n) => n.close()))
  await pool?.close()
  await upstash?.stop()
})

/** One Redis REST call as the bridge saw it: the command names, and the key of each GET/SET. */
type RedisCall = string[]

/** An edge (one app, like one isolate or one Node process) on this test's Redis, recording its Redis calls. */
function edge(env: Record<string, string> = {}) {
  const config = parseEdgeConfig({
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: SECRET,
    DEV_MODE: '1',
    REQUEST_LOG: '0',
    DEFAULT_RPM: '100000',
    DEFAULT_TPM: '100000000',
    ...env,
  })
  const calls: RedisCall[] = []
  class Recording extends UndiciRedisRequester {
    override async request<T = unknown>(req: UpstashRequest): Promise<UpstashResponse<T>> {
      const commands = (req.path?.[0] === 'pipeline' ? req.body : [req.body]) as unknown[][]
      calls.push(commands.map((c) => (c[0] === 'get' || c[0] === 'set' ? `${String(c[0])} ${String(c[1])}` : String(c[0]))))
      return super.request<T>(req)
    }
  }
  const samples: LatencySample[] = []
  const background: Array<Promise<unknown>> = []
  const deps = composeEdgeDeps(config, {
    redis: (timeoutMs) => new Redis(new Recording({ url: config.upstash.url, token: config.upstash.token, timeoutMs, pool })),
    // fetch under the headers timeout, as the Workers entry reaches nodes.
    upstream: withHeadersTimeout((url, init) => fetch(url, init)),
    coalesce: true,
  })
  const app = createApp({
    ...deps,
    latency: { record: async (s) => void samples.push(s) },
    waitUntil: (w) => void background.push(w),
  })
  return {
    calls,
    samples,
    /** Resolves once the background work started so far (affinity writes, records) is done. */
    settled: () => Promise.allSettled(background),
    async chat(apiKey: string, body: object, requestId = `aff-${crypto.randomUUID()}`) {
      const res = await app.request('/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'x-request-id': requestId, 'x-zl-client-geo': `${US_EAST.lat},${US_EAST.lon}` },
        body: JSON.stringify(body),
      })
      const json = (await res.json()) as { choices?: Array<{ message: { content: string } }> }
      expect(res.status, JSON.stringify(json)).toBe(200)
      // The stand-in answers "hello from <node id>".
      const node = json.choices![0]!.message.content.replace('hello from ', '')
      return { node, affinity: res.headers.get('x-zl-affinity'), failover: res.headers.get('x-zl-failover') }
    },
    regions: async () => (await (await app.request('/v1/regions', { headers: { authorization: `Bearer ${await apiKey()}` } })).json()) as { nodes: Array<{ id: string; draining: boolean; prefixHitRate: number | null }> },
  }
}

/** A fresh API key of the test's tenant (its rate-limit budgets are new: its first charge goes to Redis). */
async function apiKey(): Promise<string> {
  const key = generateApiKey()
  await redis.hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: `key_${crypto.randomUUID().slice(0, 8)}`, tenant: TENANT, name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false }))
  return key
}

/** Turn `n` of the conversation that opened with `first`: the whole history is resent, as chat clients do. */
function turn(first: string, n: number): object {
  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: first }]
  for (let i = 2; i <= n; i++) messages.push({ role: 'assistant', content: `hello from a node (${i - 1})` }, { role: 'user', content: `and then ${i}?` })
  return { model: 'tiny', messages, max_tokens: 8 }
}

const keyOf = (body: object) => affinityKeyOf(parseChatCompletionRequest(body), TENANT)

describe('cache-affine routing over 2 nodes in one region', () => {
  const conversations = Array.from({ length: 12 }, (_, i) => `Plan trip number ${i} to somewhere warm.`)
  const servedBy = new Map<string, string>()

  it('sends every turn of a conversation to the same node, and different conversations over both', async () => {
    const a = edge()
    const key = await apiKey()
    for (let n = 1; n <= 4; n++) {
      for (const first of conversations) {
        const r = await a.chat(key, turn(first, n))
        expect(r.affinity).toBe('hit')
        if (n === 1) servedBy.set(first, r.node)
        else expect(r.node, `${first} turn ${n}`).toBe(servedBy.get(first))
      }
    }
    expect(new Set(servedBy.values())).toEqual(new Set(['use-1', 'use-2']))
    await expect.poll(() => a.samples.length).toBe(48)
    expect(new Set(a.samples.map((s) => s.affinity))).toEqual(new Set(['hit']))
  })

  it('lets a second edge with an empty memory find a conversation where the first served it, the read riding in its tokens/min round trip', async () => {
    const first = 'A conversation that started on the node that is not its ring home.'
    const body = turn(first, 1)
    const home = ringOrder(nodes, keyOf(body).point)[0]!.id
    const other = nodes.find((n) => n.id !== home)!.id
    // Turn 1 on edge A: its ring home is full (503), so the other node serves it and is remembered.
    const a = edge()
    const requestId = `aff-full-${crypto.randomUUID()}`
    script.set(requestId, { [home]: '503' })
    const t1 = await a.chat(await apiKey(), body, requestId)
    expect(t1).toMatchObject({ node: other, affinity: 'moved', failover: '1' })
    await a.settled()
    await expect.poll(async () => ((await redis.get(affinityRedisKey(keyOf(body).hash))) as { node?: string } | null)?.node).toBe(other)

    // Turn 2 on edge B (a new isolate: nothing in memory, a fresh API key so its charge goes to Redis).
    const b = edge()
    const t2 = await b.chat(await apiKey(), turn(first, 2))
    expect(t2).toMatchObject({ node: other, affinity: 'hit' })
    // Without the memory the ring would have sent it home: what edge C (AFFINITY=off) does.
    const c = edge({ AFFINITY: 'off' })
    expect((await c.chat(await apiKey(), turn(first, 2))).affinity).toBe('none')

    // The read cost no round trip: B made exactly C's Redis calls, its GET inside the tokens/min EVALSHA's pipeline.
    await Promise.all([b.settled(), c.settled()])
    const aff = `get ${affinityRedisKey(keyOf(body).hash)}`
    const carried = b.calls.filter((call) => call.includes(aff))
    expect(carried).toEqual([['evalsha', aff]])
    const withoutAffinityWork = (calls: RedisCall[]) => calls.map((call) => call.filter((cmd) => !cmd.includes(' zl:aff:')))
    expect(withoutAffinityWork(b.calls)).toEqual(c.calls)
    // B knew the placement already (written by A a moment ago): nothing to write either.
    expect(b.calls.flat().filter((cmd) => cmd.startsWith('set '))).toEqual([])
    expect(c.calls.flat().filter((cmd) => cmd.includes('zl:aff:'))).toEqual([])
  })

  it('moves the conversations of a draining node to the other one, and keeps them there after it returns', async () => {
    const a = edge()
    const key = await apiKey()
    const drained = 'use-1'
    const mine = conversations.filter((c) => servedBy.get(c) === drained)
    expect(mine.length).toBeGreaterThan(0)
    for (const first of mine) expect((await a.chat(key, turn(first, 5))).node).toBe(drained)

    beats.get(drained)!.draining = true
    await writeBeats()
    await expect.poll(async () => (await a.regions()).nodes.find((n) => n.id === drained)?.draining, { timeout: 5000 }).toBe(true)
    for (const first of mine) expect(await a.chat(key, turn(first, 6))).toMatchObject({ node: 'use-2', affinity: 'moved' })
    // Their prefix now lives on use-2: they stay there, even once use-1 serves again.
    beats.get(drained)!.draining = false
    await writeBeats()
    await expect.poll(async () => (await a.regions()).nodes.find((n) => n.id === drained)?.draining, { timeout: 5000 }).toBe(false)
    for (const first of mine) expect(await a.chat(key, turn(first, 7))).toMatchObject({ node: 'use-2', affinity: 'hit' })
  })

  it('shows the prefix hit rate a node publishes in /v1/regions (null where it publishes none)', async () => {
    const table = await edge().regions()
    expect(table.nodes.map((n) => [n.id, n.prefixHitRate])).toEqual([['use-1', 0.5], ['use-2', null]])
  })
})
