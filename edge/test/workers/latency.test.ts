/**
 * Latency records inside workerd: one sample per request, stored after the response in
 * waitUntil (Redis histograms through the bridge, summed per isolate and written by the request
 * that opened the batch; and Analytics Engine when bound), with the request's dimensions; a
 * client that leaves is client_aborted. Also /dashboard as bundled into the Worker (Text modules)
 * and /v1/stats/latency through the real Worker.
 */
import { createExecutionContext, SELF, waitOnExecutionContext } from 'cloudflare:test'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createApp } from '../../src/app.ts'
import type { LatencyStats } from '../../src/dashboard/latency-stats.ts'
import type { AnalyticsEngineDataset } from '../../src/latency/analytics-engine-recorder.ts'
import { bucketOf, latencyKey, parseField } from '../../src/latency/latency-keys.ts'
import type { LatencyRecorder, LatencySample } from '../../src/latency/latency-recorder.ts'
import { createWorkerDeps, type Env } from '../../src/entries/worker.ts'
import { chatBody, edgeRequest, REGION_COORDS, script, tenantKey, testEnv, testRedis, uniqueRequestId } from './harness.ts'

/** The app as the Worker builds it, with the recorder observed; `call` waits for waitUntil work. */
function observedApp(extraEnv: Partial<Env> = {}) {
  const samples: LatencySample[] = []
  const real = createWorkerDeps({ ...testEnv, ...extraEnv } as Env)
  const spy: LatencyRecorder = {
    async record(s) {
      samples.push(s)
      await real.latency!.record(s)
    },
  }
  const app = createApp({ ...real, latency: spy, log: () => {} })
  return {
    samples,
    async call(req: Request): Promise<{ res: Response; body: string }> {
      const ctx = createExecutionContext()
      const res = await app.fetch(req, testEnv, ctx)
      const body = await res.text()
      await waitOnExecutionContext(ctx)
      return { res, body }
    },
  }
}

/** Every field of a hash summed by metric kind (o / t / d). */
function sums(hash: Record<string, unknown> | null): Record<string, number> {
  const out: Record<string, number> = {}
  for (const [field, v] of Object.entries(hash ?? {})) {
    const f = parseField(field)
    if (!f) continue
    const k = f.metric.kind === 'outcome' ? `o:${f.metric.outcome}` : f.metric.kind
    out[k] = (out[k] ?? 0) + Number(v)
  }
  return out
}

describe('latency records in workerd', () => {
  it('writes exactly one record per request, with its dimensions, once waitUntil is flushed', async () => {
    const { key, tenant } = await tenantKey()
    const app = observedApp()
    const { res } = await app.call(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, geo: REGION_COORDS['eu-west'] }))
    expect(res.status).toBe(200)
    expect(app.samples).toHaveLength(1)
    const s = app.samples[0]!
    expect(s).toMatchObject({ edge: 'local', nodeRegion: 'eu-west', model: 'tiny', tenant, status: 200, outcome: 'ok', failovers: 0 })
    expect(s.ttfbMs).toBeGreaterThanOrEqual(0)
    expect(s.totalMs).toBeGreaterThanOrEqual(s.ttfbMs!)

    const redis = testRedis()
    const minuteKey = latencyKey('minute', bucketOf('minute', s.endedAtMs), { kind: 'tenant', tenant })
    const hourKey = latencyKey('hour', bucketOf('hour', s.endedAtMs), { kind: 'tenant', tenant })
    for (const k of [minuteKey, hourKey]) {
      const hash = await redis.hgetall(k)
      expect(sums(hash), k).toEqual({ 'o:ok': 1, ttfb: 1, total: 1 })
      expect(Object.keys(hash!).every((f) => f.startsWith('local|eu-west|'))).toBe(true)
    }
    expect(await redis.ttl(minuteKey)).toBeGreaterThan(3600)
    expect(await redis.ttl(minuteKey)).toBeLessThanOrEqual(2 * 3600)
    expect(await redis.ttl(hourKey)).toBeGreaterThan(24 * 3600)
  })

  it('records refusals too: a bad key as auth_failed without a tenant or node', async () => {
    const app = observedApp()
    const { res } = await app.call(edgeRequest('/v1/chat/completions', chatBody(), { key: 'zl-' + 'Q'.repeat(32) }))
    expect(res.status).toBe(401)
    expect(app.samples).toHaveLength(1)
    expect(app.samples[0]).toMatchObject({ status: 401, outcome: 'auth_failed' })
    expect(app.samples[0]!.tenant).toBeUndefined()
    expect(app.samples[0]!.nodeRegion).toBeUndefined()
  })

  it('records a client that cancels the stream as client_aborted', async () => {
    const { key } = await tenantKey()
    const app = observedApp()
    const requestId = uniqueRequestId('lat-abort')
    await script(requestId, { 'us-east': 'slow', 'eu-west': 'slow', 'ap-south': 'slow' })
    const ctx = createExecutionContext()
    const res = await createApp({ ...createWorkerDeps(testEnv), latency: { record: async (s) => void app.samples.push(s) }, log: () => {} })
      .fetch(edgeRequest('/v1/chat/completions', chatBody({ stream: true }), { key, requestId, geo: REGION_COORDS['us-east'] }), testEnv, ctx)
    const reader = res.body!.getReader()
    await reader.read()
    await reader.cancel()
    await waitOnExecutionContext(ctx)
    expect(app.samples).toHaveLength(1)
    expect(app.samples[0]).toMatchObject({ requestId, outcome: 'client_aborted', status: 200, nodeRegion: 'us-east' })
  })

  it('writes an Analytics Engine data point when the dataset is bound', async () => {
    const { key, tenant } = await tenantKey()
    const points: Array<Parameters<AnalyticsEngineDataset['writeDataPoint']>[0]> = []
    const app = observedApp({ LATENCY: { writeDataPoint: (p) => void points.push(p) } })
    await app.call(edgeRequest('/v1/chat/completions', chatBody(), { key, geo: REGION_COORDS['ap-south'] }))
    expect(points).toHaveLength(1)
    // blob6: a conversation seen nowhere yet goes to its ring home, the region's one node.
    expect(points[0]!.blobs).toEqual(['local', 'ap-south', 'tiny', tenant, 'ok', 'hit'])
    expect(points[0]!.indexes).toEqual([tenant])
    const [ttfb, total, status, failovers] = points[0]!.doubles!
    expect(ttfb).toBeGreaterThanOrEqual(0)
    expect(total).toBeGreaterThanOrEqual(ttfb!)
    expect([status, failovers]).toEqual([200, 0])
  })
})

describe('through the Worker itself', () => {
  afterEach(() => {
    vi.restoreAllMocks()
  })

  it('counts a request under its Cloudflare colo and serves it back from /v1/stats/latency', async () => {
    const { key, tenant } = await tenantKey()
    const res = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key, geo: REGION_COORDS['us-east'] }), { cf: { colo: 'IAD' } })
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    // The record lands in waitUntil after the response: wait for its last write (the hour hash).
    const hourKey = latencyKey('hour', bucketOf('hour', Date.now()), { kind: 'tenant', tenant })
    const redis = testRedis()
    const deadline = Date.now() + 10_000
    while (!(await redis.exists(hourKey)) && Date.now() < deadline) await scheduler.wait(10)
    const stats = (await (await SELF.fetch(edgeRequest('/v1/stats/latency?window=5m', undefined, { key }))).json()) as LatencyStats
    expect(stats).toMatchObject({ scope: 'tenant', tenant, totals: { requests: 1 } })
    expect(stats.pairs.map((p) => [p.edge, p.region, p.requests])).toEqual([['IAD', 'us-east', 1]])
  })

  it('writes the samples of many concurrent requests in a few pipelines, and the stats read back every one', async () => {
    const { key, tenant } = await tenantKey()
    const n = 32
    // Every Upstash REST call the Worker makes passes through the isolate's fetch: count the
    // latency pipelines that carry this test's tenant (one per batch that holds its samples).
    const fetch = globalThis.fetch
    const latencyWrites: string[] = []
    vi.spyOn(globalThis, 'fetch').mockImplementation((input, init) => {
      const url = input instanceof Request ? input.url : String(input)
      const body = typeof init?.body === 'string' ? init.body : ''
      if (url.startsWith(testEnv.UPSTASH_REDIS_REST_URL) && /"hincrby"/i.test(body) && body.includes(`:t:${tenant}`)) latencyWrites.push(body)
      return fetch(input, init)
    })
    const responses = await Promise.all(
      Array.from({ length: n }, async () => {
        const res = await SELF.fetch(edgeRequest('/v1/chat/completions', chatBody(), { key, geo: REGION_COORDS['eu-west'] }))
        await res.arrayBuffer()
        return res.status
      }),
    )
    expect(responses).toEqual(responses.map(() => 200))
    // Written in waitUntil after the responses: wait for all n.
    const redis = testRedis()
    const minuteKeys = () => [0, 1].map((back) => latencyKey('minute', bucketOf('minute', Date.now()) - back, { kind: 'tenant', tenant }))
    const stored = async () => (await Promise.all(minuteKeys().map((k) => redis.hgetall(k)))).reduce((sum, h) => sum + (sums(h)['o:ok'] ?? 0), 0)
    const deadline = Date.now() + 15_000
    while ((await stored()) < n && Date.now() < deadline) await scheduler.wait(20)
    expect(await stored()).toBe(n)
    // Per request this was one pipeline of 16 commands. Batches hold 8 samples here
    // (LATENCY_BATCH_MAX_SAMPLES in vitest.config.ts), so the 32 fill at least four, each
    // written by the request that filled it (waking the opener from there left it hung in
    // workerd, and nothing was stored); a loaded machine may spread them over a few more.
    expect(latencyWrites.length).toBeGreaterThanOrEqual(n / 8)
    expect(latencyWrites.length).toBeLessThanOrEqual(n / 8 + 3)
    const stats = (await (await SELF.fetch(edgeRequest('/v1/stats/latency?window=5m', undefined, { key }))).json()) as LatencyStats
    expect(stats).toMatchObject({ scope: 'tenant', tenant, totals: { requests: n } })
    expect(stats.pairs.map((p) => [p.edge, p.region, p.requests])).toEqual([['local', 'eu-west', n]])
  })

  it('serves the dashboard bundled as text modules, with its Content-Security-Policy', async () => {
    const page = await SELF.fetch('https://edge.test/dashboard')
    expect(page.status).toBe(200)
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'")
    expect(await page.text()).toContain('<script src="/dashboard/uplot.js" defer></script>')
    const lib = await SELF.fetch('https://edge.test/dashboard/uplot.js')
    expect(lib.headers.get('content-type')).toBe('text/javascript; charset=utf-8')
    expect((await lib.text()).length).toBeGreaterThan(10_000)
  })
})

declare const scheduler: { wait(ms: number): Promise<void> }
