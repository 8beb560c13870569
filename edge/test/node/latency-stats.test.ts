/**
 * Latency records in, /v1/stats/latency out, over a real redis-server behind the Upstash bridge
 * and the Node entry (h2c stand-in nodes in three regions): counts match what was sent, a key
 * sees its own tenant only, the admin token sees everyone, a client that leaves is recorded as
 * client_aborted, and each request leaves exactly one JSON log line (with its trace, without the
 * key). Also the /dashboard files with their Content-Security-Policy.
 */
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { parseEdgeConfig } from '../../src/config.ts'
import type { LatencyStats } from '../../src/dashboard/latency-stats.ts'
import type { LatencyRecorder, LatencySample } from '../../src/latency/latency-recorder.ts'
import { createRedisLatencyRecorder } from '../../src/latency/redis-latency-store.ts'
import { startNodeEdge, type NodeEdge } from '../../src/entries/node-server.ts'
import { REGIONS, startFleet, type Fleet } from '../support/stand-in-fleet.ts'

const SECRET = 'zl-test-edge-secret-0123456789'
const ADMIN = 'zl-test-admin-token-0123456789'
const GEO = Object.fromEntries(REGIONS.map((r) => [r.id, `${r.lat},${r.lon}`])) as Record<(typeof REGIONS)[number]['id'], string>

let upstash: LocalUpstash
let fleet: Fleet
let edge: NodeEdge
const keys: Record<'a' | 'b', string> = { a: '', b: '' }
const logs: Array<Record<string, unknown>> = []
const samples: LatencySample[] = []
const sampleWaiters = new Set<() => void>()

/** The real Redis recorder, observed: resolves waiters as samples are stored. */
function observed(inner: LatencyRecorder): LatencyRecorder {
  return {
    async record(s) {
      await inner.record(s)
      samples.push(s)
      for (const w of [...sampleWaiters]) w()
    },
  }
}

/** Resolves once `pred` holds over the stored samples (checked on every new one). */
function samplesWhere(pred: (all: LatencySample[]) => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (!pred(samples)) return
      sampleWaiters.delete(check)
      clearTimeout(timer)
      resolve()
    }
    const timer = setTimeout(() => {
      sampleWaiters.delete(check)
      reject(new Error(`timed out waiting for ${what}; have ${samples.length} samples`))
    }, timeoutMs)
    sampleWaiters.add(check)
    check()
  })
}

beforeAll(async () => {
  ;[upstash, fleet] = await Promise.all([startLocalUpstash(), startFleet({ secret: SECRET, protocol: 'h2c' })])
  const config = parseEdgeConfig({
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: SECRET,
    ADMIN_TOKEN: ADMIN,
    GPU_NODES: JSON.stringify(fleet.gpuNodes),
    EDGE_REGION: 'test-edge',
    DEV_MODE: '1',
    DEFAULT_RPM: '100000',
    DEFAULT_TPM: '100000000',
  })
  const redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false, enableAutoPipelining: false })
  edge = await startNodeEdge(config, { host: '127.0.0.1', port: 0 }, {
    overrides: { latency: observed(createRedisLatencyRecorder(redis)), log: (line) => logs.push(line) },
  })
  for (const tenant of ['a', 'b'] as const) {
    keys[tenant] = generateApiKey()
    const fields = toApiKeyFields({ id: `key-${tenant}`, tenant: `tenant-${tenant}`, name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false })
    await redis.hset(apiKeyRedisKey(await hashApiKey(keys[tenant])), fields)
  }
})

afterAll(async () => {
  await edge?.close()
  await fleet?.close()
  await upstash?.stop()
})

function chat(opts: { key?: string; geo: string; stream?: boolean; requestId?: string; traceparent?: string; signal?: AbortSignal }): Promise<Response> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-zl-client-geo': opts.geo }
  if (opts.key) headers.authorization = `Bearer ${opts.key}`
  if (opts.requestId) headers['x-request-id'] = opts.requestId
  if (opts.traceparent) headers.traceparent = opts.traceparent
  return fetch(`${edge.url}/v1/chat/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: opts.stream ?? false }),
    ...(opts.signal ? { signal: opts.signal } : {}),
  })
}

async function stats(token: string | undefined, query = 'window=15m'): Promise<{ status: number; body: LatencyStats & { error?: { param?: string } } }> {
  const res = await fetch(`${edge.url}/v1/stats/latency?${query}`, { headers: token ? { authorization: `Bearer ${token}` } : {} })
  return { status: res.status, body: (await res.json()) as LatencyStats & { error?: { param?: string } } }
}

const byRegion = (s: LatencyStats) => Object.fromEntries(s.regions.map((r) => [r.region ?? 'none', r.requests]))

describe('latency records and /v1/stats/latency', () => {
  it('counts what each tenant sent per region; a key sees its tenant, the admin token everyone', async () => {
    const plan = [
      ...Array.from({ length: 3 }, (_, i) => ({ key: keys.a, geo: GEO['us-east'], stream: i % 2 === 0 })),
      ...Array.from({ length: 2 }, () => ({ key: keys.a, geo: GEO['eu-west'], stream: true })),
      ...Array.from({ length: 4 }, () => ({ key: keys.b, geo: GEO['ap-south'], stream: false })),
      { key: 'zl-' + 'x'.repeat(32), geo: GEO['us-east'], stream: false },
    ]
    const before = samples.length
    const statuses = await Promise.all(plan.map(async (p) => {
      const res = await chat(p)
      await res.arrayBuffer()
      return res.status
    }))
    expect(statuses).toEqual([...Array(9).fill(200), 401])
    await samplesWhere((all) => all.length >= before + plan.length, `${plan.length} samples`)

    const admin = await stats(ADMIN)
    expect(admin.status).toBe(200)
    expect(admin.body.scope).toBe('all')
    expect(byRegion(admin.body)).toMatchObject({ 'us-east': 3, 'eu-west': 2, 'ap-south': 4, none: 1 })
    expect(admin.body.pairs.find((p) => p.region === 'ap-south')).toMatchObject({ edge: 'test-edge', requests: 4, errors: 0, outcomes: { ok: 4 } })
    expect(admin.body.regions.find((r) => r.region === null)!.outcomes).toEqual({ auth_failed: 1 })
    const usEast = admin.body.regions.find((r) => r.region === 'us-east')!
    expect(usEast.ttfbMs.p50).toBeGreaterThanOrEqual(0)
    expect(usEast.totalMs.p99).toBeGreaterThanOrEqual(usEast.ttfbMs.p50!)
    expect(admin.body.series.regions.map((r) => r.region)).toEqual(['ap-south', 'eu-west', 'us-east'])
    expect(admin.body.series.regions.find((r) => r.region === 'ap-south')!.requests.reduce((a, b) => a + b, 0)).toBe(4)

    const a = await stats(keys.a)
    expect(a.body).toMatchObject({ scope: 'tenant', tenant: 'tenant-a' })
    expect(byRegion(a.body)).toEqual({ 'us-east': 3, 'eu-west': 2 })
    const b = await stats(keys.b)
    expect(byRegion(b.body)).toEqual({ 'ap-south': 4 })

    const filtered = await stats(ADMIN, 'window=1h&region=eu-west')
    expect(filtered.body.regions.map((r) => r.region)).toEqual(['eu-west'])
  })

  it('refuses a missing key with 401 and a bad window with 400 naming it', async () => {
    expect((await stats(undefined)).status).toBe(401)
    expect((await stats('zl-' + 'y'.repeat(32))).status).toBe(401)
    for (const window of ['0m', '25h', 'soon']) {
      const res = await stats(ADMIN, `window=${window}`)
      expect(res.status, window).toBe(400)
      expect(res.body.error?.param).toBe('window')
    }
  })

  it('records a client that leaves mid-stream as client_aborted', async () => {
    const requestId = `leave-${crypto.randomUUID()}`
    const control = await fetch(`${fleet.controlUrl}/script`, { method: 'POST', body: JSON.stringify({ requestId, modes: { 'us-east': 'slow' } }) })
    await control.arrayBuffer()
    const client = new AbortController()
    const res = await chat({ key: keys.a, geo: GEO['us-east'], stream: true, requestId, signal: client.signal })
    const reader = res.body!.getReader()
    await reader.read()
    client.abort()
    await reader.read().catch(() => {})
    await samplesWhere((all) => all.some((s) => s.requestId === requestId), 'the aborted request’s sample')
    const s = samples.find((x) => x.requestId === requestId)!
    expect(s).toMatchObject({ outcome: 'client_aborted', status: 200, nodeRegion: 'us-east', tenant: 'tenant-a', edge: 'test-edge', model: 'tiny' })
    expect(s.ttfbMs).toBeLessThanOrEqual(s.totalMs)
    expect(samples.filter((x) => x.requestId === requestId)).toHaveLength(1)
  })

  it('logs one JSON line per request with its traceparent, never the key', async () => {
    const requestId = `log-${crypto.randomUUID()}`
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
    const res = await chat({ key: keys.b, geo: GEO['eu-west'], requestId, traceparent: `00-${traceId}-00f067aa0ba902b7-01` })
    await res.arrayBuffer()
    await samplesWhere((all) => all.some((s) => s.requestId === requestId), 'the logged request’s sample')
    const lines = logs.filter((l) => l.requestId === requestId)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ msg: 'request', route: '/v1/chat/completions', status: 200, outcome: 'ok', region: 'eu-west', tenant: 'tenant-b', edge: 'test-edge' })
    expect(String(lines[0]!.traceparent)).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    expect(typeof lines[0]!.ttfbMs).toBe('number')
    expect(typeof lines[0]!.durationMs).toBe('number')
    expect(JSON.stringify(logs)).not.toContain(keys.b)
  })
})

describe('/dashboard on the Node entry', () => {
  it('serves the page and its files with a strict Content-Security-Policy', async () => {
    const page = await fetch(`${edge.url}/dashboard`)
    expect(page.status).toBe(200)
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8')
    const csp = page.headers.get('content-security-policy')!
    expect(csp).toContain("default-src 'self'")
    expect(csp).toContain("script-src 'self'")
    expect(csp).not.toContain('unsafe-inline')
    const html = await page.text()
    expect(html).not.toMatch(/<script>|<style|\sstyle=|\son\w+=/i) // nothing inline
    for (const [file, type, marker] of [['uplot.js', 'text/javascript', 'uPlot'], ['uplot.css', 'text/css', '.uplot'], ['dashboard.js', 'text/javascript', '/v1/stats/latency']] as const) {
      const res = await fetch(`${edge.url}/dashboard/${file}`)
      expect(res.status, file).toBe(200)
      expect(res.headers.get('content-type')).toContain(type)
      expect(await res.text()).toContain(marker)
    }
    expect((await fetch(`${edge.url}/dashboard/missing.js`)).status).toBe(404)
  })
})
