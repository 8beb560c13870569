/**
 * WAN section: what a request served one region away costs beyond its round
 * trip. Three regions over infra/local/wan-relay.ts (this kernel has no netem): the Node edge and a
 * GPU node in us-east, a GPU node in eu-west (RTT 70 ms from the edge) and one in ap-south
 * (190 ms). The edge's GPU_NODES name each node by its relay's URL, and the local node sits behind
 * a relay too (RTT 0), so every path has the same hops.
 *
 * - Where a request is served is chosen by the client's location (`x-zl-client-geo`, DEV_MODE):
 *   the same edge, key and body; only the ranking moves. AFFINITY=off, so routing is by RTT +
 *   queue wait alone and a conversation is never held in the region it was last served in.
 * - Redis (Upstash, global) sits in the edge's region: a regional read replica is what the edge
 *   talks to in production, and its round trips (key lookup, limiter) are the same whichever
 *   region serves the request, so they cancel out of the figure. The nodes do not heartbeat (the
 *   static table is the registry): their heartbeats are off the request path.
 * - Concurrency 1, one request to each region per iteration (order rotated), streams, both
 *   dialects alternating, after a warm-up (connections open, JIT warm). Per round:
 *   excess = p50 TTFB(eu-west) − p50 TTFB(us-east) − 70 ms; the figure is the median over rounds.
 *   The same for ap-south (190 ms), and for the nodes asked directly through the same relays
 *   (signed requests, one warm HTTP/2 connection per node, as the edge holds): what the link and
 *   the node cost by themselves.
 * - Also measured: the first request to each far region from a fresh edge (whose connections
 *   the Node entry opens ahead of need; before it did, this request paid the TCP handshake), the
 *   connections each relay accepted over the whole run (one per client means every client reused
 *   its connection), bursts of 8 concurrent requests after a pause, and — when it starts — the
 *   Workers entry under `wrangler dev` over the same relays (workerd speaks HTTP/1.1 to origins,
 *   and its connections are its own: reported, no target).
 */
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from '@upstash/redis'
import { Agent } from 'undici'
import { seedKey } from '../../infra/keys/key-admin.ts'
import { signRequest } from '../../shared/src/signature.ts'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { benchAgent, sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody, DIALECT_PATH, type BenchDialect } from '../load/dialects.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { startGpuNode, startNodeEdge, startUpstashProcs, startWranglerDev, type EdgeProc, type GpuNode } from '../lib/services.ts'
import { median, percentile, round, summarize } from '../lib/stats.ts'
import { startWanRelay, type WanRelay } from '../../infra/local/wan-relay.ts'

const API_KEY = 'zl-wankey' + '0'.repeat(32 - 'wankey'.length)
const MAX_TOKENS = 8
/** The long-prompt case: what HTTP/2 flow control does to a body larger than its 64 KiB default window. */
const LARGE_BODY_BYTES = 100_000

/** The three local regions (DESIGN.md §9 coordinates) and their RTT from the edge in us-east. */
export const WAN_REGIONS = [
  { id: 'us-east', lat: 39.0, lon: -77.5, rttMs: 0 },
  { id: 'eu-west', lat: 53.3, lon: -6.3, rttMs: 70 },
  { id: 'ap-south', lat: 19.1, lon: 72.9, rttMs: 190 },
] as const
type RegionId = (typeof WAN_REGIONS)[number]['id']
type Path = 'edge' | 'direct'
type Size = 'small' | 'large'
type Dialect = 'openai-chat' | 'anthropic-messages'
type Far = 'eu-west' | 'ap-south'

export async function runWan(ctx: BenchContext, opts: { modelDir?: string } = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/tiny'
  await ensureGeneratedModel(modelDir, (l) => ctx.log(l))
  const notes: string[] = []
  const raw: Record<string, unknown> = { model: modelDir, max_tokens: MAX_TOKENS, rtt_ms: Object.fromEntries(WAN_REGIONS.map((r) => [r.id, r.rttMs])) }
  const secret = randomBytes(24).toString('hex')
  const started: Array<{ stop?(): Promise<void>; close?(): Promise<void> }> = []
  const agent = benchAgent()
  try {
    ctx.log('starting redis-server + Upstash bridge, a GPU node per region, a WAN relay per node, and the Node edge (us-east)')
    const upstash = await startUpstashProcs()
    started.push(upstash)
    await seedKey(new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false }), API_KEY, { tenant: 'bench', name: 'wan key', id: 'key_wan', rpm: 1_000_000_000, tpm: 1_000_000_000_000 })
    const nodes: GpuNode[] = []
    for (const r of WAN_REGIONS) {
      const node = await startGpuNode({ modelDir, secret, env: { INTRA_OP_THREADS: '1', REGION: r.id, NODE_ID: `wan-${r.id}` } })
      started.push(node)
      nodes.push(node)
    }
    const relays: WanRelay[] = []
    for (const [i, r] of WAN_REGIONS.entries()) {
      const u = new URL(nodes[i]!.url)
      const relay = await startWanRelay({ target: { host: u.hostname, port: Number(u.port) }, rttMs: r.rttMs })
      started.push(relay)
      relays.push(relay)
    }
    const model = nodes[0]!.model
    const edgeEnv: Record<string, string> = {
      UPSTASH_REDIS_REST_URL: upstash.restUrl,
      UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
      EDGE_SHARED_SECRET: secret,
      GPU_NODES: JSON.stringify(WAN_REGIONS.map((r, i) => ({ id: `wan-${r.id}`, url: relays[i]!.url, region: r.id, lat: r.lat, lon: r.lon, models: [model] }))),
      RATE_LIMIT_FAILURE_MODE: 'closed',
      EDGE_REGION: 'us-east',
      EDGE_LAT: String(WAN_REGIONS[0].lat),
      EDGE_LON: String(WAN_REGIONS[0].lon),
      DEV_MODE: '1',
      AFFINITY: 'off',
      REQUEST_LOG: '0',
    }
    const edge: EdgeProc = await startNodeEdge(edgeEnv)
    started.push(edge)

    const small: Record<Dialect, Uint8Array> = {
      'openai-chat': buildBody('openai-chat', { model, text: 'Say hello to the world in a few words.', maxTokens: MAX_TOKENS, stream: true, ignoreEos: true }),
      'anthropic-messages': buildBody('anthropic-messages', { model, text: 'Say hello to the world in a few words.', maxTokens: MAX_TOKENS, stream: true, ignoreEos: true }),
    }
    // A long prompt's bytes without its prefill (which would cost the same in every region):
    // the same request padded with JSON whitespace, which the edge forwards as is and the node's
    // parser skips.
    const large: Record<Dialect, Uint8Array> = { 'openai-chat': padded(small['openai-chat'], LARGE_BODY_BYTES), 'anthropic-messages': padded(small['anthropic-messages'], LARGE_BODY_BYTES) }
    const bodies: Record<Size, Record<Dialect, Uint8Array>> = { small, large }
    // Direct requests: one HTTP/2 connection per node, as the edge's upstream holds.
    const directAgent = new Agent({ allowH2: true, useH2c: true, connections: 1, pipelining: 128, headersTimeout: 0, bodyTimeout: 0, keepAliveTimeout: 600_000, keepAliveMaxTimeout: 600_000 } as Agent.Options)
    started.push({ close: () => directAgent.close() })
    let reqNo = 0
    const send = async (path: Path, region: RegionId, dialect: Dialect, size: Size = 'small', via: EdgeProc = edge): Promise<RequestRecord> => {
      const i = WAN_REGIONS.findIndex((r) => r.id === region)
      const body = bodies[size][dialect]
      if (path === 'direct') {
        const requestId = `wan-${process.pid}-${reqNo++}`
        const headers = { 'x-request-id': requestId, 'x-zl-signature': await signRequest({ secret, method: 'POST', path: DIALECT_PATH[dialect as BenchDialect], requestId, body, nowMs: Date.now() }) }
        return sendRequest({ origin: relays[i]!.url, dialect, body, stream: true, headers, dispatcher: directAgent, timeoutMs: 30_000 })
      }
      const auth: Record<string, string> = dialect === 'anthropic-messages' ? { 'x-api-key': API_KEY, 'anthropic-version': '2023-06-01' } : { authorization: `Bearer ${API_KEY}` }
      const r = WAN_REGIONS[i]!
      return sendRequest({ origin: via.url, dialect, body, stream: true, headers: { ...auth, 'x-zl-client-geo': `${r.lat},${r.lon}` }, dispatcher: agent, timeoutMs: 30_000 })
    }
    const check = (rec: RequestRecord, region: RegionId, what: string): RequestRecord => {
      if (rec.status !== 200 || rec.error) throw new Error(`${what} to ${region}: HTTP ${rec.status} ${rec.error ?? ''}`)
      return rec
    }

    // Warm-up: JIT, key cache, limiter scripts; every connection is open by now.
    const warm = ctx.quick ? 10 : 30
    for (let i = 0; i < warm; i++) for (const r of WAN_REGIONS) for (const p of ['edge', 'direct'] as const) check(await send(p, r.id, i % 2 ? 'anthropic-messages' : 'openai-chat', i % 3 ? 'small' : 'large'), r.id, `warm-up ${p}`)

    const rounds = ctx.quick ? 3 : 5
    const iters = ctx.quick ? 8 : 20
    const empty = () => ({ 'us-east': [] as number[], 'eu-west': [] as number[], 'ap-south': [] as number[] })
    const key = (p: Path, size: Size) => `${p}:${size}` as const
    type Key = ReturnType<typeof key>
    const KEYS: Key[] = ['edge:small', 'direct:small', 'edge:large', 'direct:large']
    const ttfb = Object.fromEntries(KEYS.map((k) => [k, empty()])) as Record<Key, Record<RegionId, number[]>>
    const excess = Object.fromEntries(KEYS.map((k) => [k, { 'eu-west': [] as number[], 'ap-south': [] as number[] }])) as Record<Key, Record<Far, number[]>>
    const combos = WAN_REGIONS.flatMap((r) => (['edge', 'direct'] as const).flatMap((p) => (['small', 'large'] as const).map((size) => [p, r.id, size] as const)))
    for (let round = 0; round < rounds; round++) {
      const per = Object.fromEntries(KEYS.map((k) => [k, empty()])) as Record<Key, Record<RegionId, number[]>>
      for (let i = 0; i < iters; i++) {
        for (const [p, region, size] of rotate(combos, i)) {
          const rec = check(await send(p, region, i % 2 ? 'anthropic-messages' : 'openai-chat', size), region, `${p} ${size}`)
          per[key(p, size)][region].push(rec.ttfbMs!)
          ttfb[key(p, size)][region].push(rec.ttfbMs!)
        }
      }
      for (const k of KEYS) for (const r of WAN_REGIONS.slice(1)) excess[k][r.id as Far].push(median(per[k][r.id]) - median(per[k]['us-east']) - r.rttMs)
      const f = (k: Key) => `${excess[k]['eu-west'].at(-1)!.toFixed(1)} / ${excess[k]['ap-south'].at(-1)!.toFixed(1)} ms`
      ctx.log(`round ${round + 1}/${rounds}: TTFB p50 us-east ${median(per['edge:small']['us-east']).toFixed(1)} ms; excess beyond RTT (eu-west / ap-south) through the edge ${f('edge:small')}, ${LARGE_BODY_BYTES / 1000} kB body ${f('edge:large')}; direct ${f('direct:small')}, ${f('direct:large')}`)
    }

    // A burst after a pause: 8 concurrent requests on the pooled connection, to eu-west and (the
    // control: the node's own time for 8 at once) to us-east.
    const burstTtfb: Record<'us-east' | 'eu-west', number[]> = { 'us-east': [], 'eu-west': [] }
    for (const region of ['us-east', 'eu-west', 'us-east', 'eu-west'] as const) {
      await sleep(ctx.quick ? 1000 : 3000)
      const burst = await Promise.all(Array.from({ length: 8 }, (_, i) => send('edge', region, i % 2 ? 'anthropic-messages' : 'openai-chat')))
      burstTtfb[region].push(...burst.map((r, i) => check(r, region, `burst ${i}`).ttfbMs!))
    }

    // A fresh edge (no connection yet): warmed on us-east requests only, then its first request
    // to each far region. Without pre-connected sessions that request opens the connection.
    const fresh: EdgeProc = await startNodeEdge(edgeEnv)
    started.push(fresh)
    for (let i = 0; i < warm * 2; i++) check(await send('edge', 'us-east', i % 2 ? 'anthropic-messages' : 'openai-chat', 'small', fresh), 'us-east', 'fresh edge warm-up')
    const firstFar: Record<Far, number> = { 'eu-west': NaN, 'ap-south': NaN }
    for (const r of ['eu-west', 'ap-south'] as const) firstFar[r] = check(await send('edge', r, 'openai-chat', 'small', fresh), r, 'fresh edge first request').ttfbMs!

    // The Workers entry under wrangler dev, same relays, same requests (small bodies, through it only).
    let wrangler: EdgeProc | undefined
    try {
      wrangler = await startWranglerDev(edgeEnv)
      started.push(wrangler)
    } catch (e) {
      notes.push(`wan: wrangler dev did not start: ${(e as Error).message.split('\n')[0]}`)
    }
    if (wrangler) {
      const via = wrangler
      for (let i = 0; i < warm; i++) for (const r of WAN_REGIONS) check(await send('edge', r.id, i % 2 ? 'anthropic-messages' : 'openai-chat', 'small', via), r.id, 'wrangler warm-up')
      const wranglerExcess: Record<Far, number[]> = { 'eu-west': [], 'ap-south': [] }
      const wranglerTtfb = empty()
      for (let round = 0; round < rounds; round++) {
        const per = empty()
        for (let i = 0; i < iters; i++) {
          for (const r of rotate(WAN_REGIONS, i)) {
            const rec = check(await send('edge', r.id, i % 2 ? 'anthropic-messages' : 'openai-chat', 'small', via), r.id, 'wrangler')
            per[r.id].push(rec.ttfbMs!)
            wranglerTtfb[r.id].push(rec.ttfbMs!)
          }
        }
        for (const r of WAN_REGIONS.slice(1)) wranglerExcess[r.id as Far].push(median(per[r.id]) - median(per['us-east']) - r.rttMs)
        ctx.log(`wrangler dev round ${round + 1}/${rounds}: excess beyond RTT (eu-west / ap-south) ${wranglerExcess['eu-west'].at(-1)!.toFixed(1)} / ${wranglerExcess['ap-south'].at(-1)!.toFixed(1)} ms`)
      }
      raw.wrangler_ttfb_ms = mapRegions((r) => summarize(wranglerTtfb[r]))
      raw.wrangler_excess_ms = { 'eu-west': round(median(wranglerExcess['eu-west'])), 'ap-south': round(median(wranglerExcess['ap-south'])) }
    }

    const warmP50 = (region: RegionId) => median(ttfb['edge:small'][region])
    raw.ttfb_ms = Object.fromEntries(KEYS.map((k) => [k, mapRegions((r) => summarize(ttfb[k][r]))]))
    raw.excess_ms_by_round = Object.fromEntries(KEYS.map((k) => [k, roundAll(excess[k])]))
    raw.excess_ms = Object.fromEntries(KEYS.map((k) => [k, { 'eu-west': round(median(excess[k]['eu-west'])), 'ap-south': round(median(excess[k]['ap-south'])) }]))
    raw.large_body_bytes = LARGE_BODY_BYTES
    raw.fresh_edge_first_request_ttfb_ms = { 'eu-west': round(firstFar['eu-west']), 'ap-south': round(firstFar['ap-south']) }
    raw.fresh_edge_first_request_excess_ms = { 'eu-west': round(firstFar['eu-west'] - warmP50('eu-west')), 'ap-south': round(firstFar['ap-south'] - warmP50('ap-south')) }
    raw.burst8_ttfb_ms = { 'us-east': summarize(burstTtfb['us-east']), 'eu-west': summarize(burstTtfb['eu-west']) }
    raw.burst8_excess_p50_ms = round(median(burstTtfb['eu-west']) - median(burstTtfb['us-east']) - 70)
    // The edge, the direct agent and the fresh edge each hold one connection per node (3 per relay
    // when all reused theirs); wrangler dev's HTTP/1.1 connections come on top.
    raw.relay_connections = Object.fromEntries(WAN_REGIONS.map((r, i) => [r.id, relays[i]!.stats().connections]))
    notes.push('wan: RTTs are simulated by a userspace TCP relay (infra/local/wan-relay.ts; no netem on this kernel): handshake and per-direction delay are modelled, TCP ACK timing (Nagle, delayed ACK, slow start) is not')

    return {
      figures: {
        cross_region_excess_ms: round(median(excess['edge:small']['eu-west'])),
        cross_region_excess_ms_ap_south: round(median(excess['edge:small']['ap-south'])),
        cross_region_excess_ms_large_body: round(median(excess['edge:large']['eu-west'])),
      },
      raw,
      notes,
    }
  } finally {
    for (const s of started.reverse()) await (s.stop ?? s.close)!.call(s)
    await agent.close()
  }
}

/** `body` (a JSON object) with whitespace before its closing brace, to `bytes` in all. */
function padded(body: Uint8Array, bytes: number): Uint8Array {
  const out = new Uint8Array(Math.max(bytes, body.length))
  out.set(body.subarray(0, body.length - 1))
  out.fill(0x20, body.length - 1, out.length - 1)
  out[out.length - 1] = 0x7d
  return out
}

function mapRegions<T>(f: (r: RegionId) => T): Record<RegionId, T> {
  return Object.fromEntries(WAN_REGIONS.map((r) => [r.id, f(r.id)])) as Record<RegionId, T>
}

function roundAll(m: Record<string, number[]>): Record<string, number[]> {
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, v.map((x) => round(x))]))
}

function rotate<T>(xs: readonly T[], by: number): T[] {
  const k = by % xs.length
  return [...xs.slice(k), ...xs.slice(0, k)]
}
