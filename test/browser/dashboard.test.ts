/**
 * The dashboard in headless Chromium against real components: redis-server + the Upstash bridge,
 * three GPU nodes on the tiny model (child processes heartbeating into that Redis) and the Node
 * edge in-process. Traffic placed near each region (DEV_MODE's x-zl-client-geo) must show up as
 * one chart series and one table row per region with non-zero counts, after the admin token is
 * typed into the page. Screenshot: test-output/dashboard.png (and docs/dashboard.png with
 * UPDATE_SCREENSHOTS=1).
 *
 * Needs Debian's chromium (.ci/run installs it). Without it the test fails with that instruction,
 * rather than skipping silently.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from '@upstash/redis'
import { chromium, type BrowserContext, type Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseEdgeConfig } from '../../edge/src/config.ts'
import type { LatencyRecorder } from '../../edge/src/latency/latency-recorder.ts'
import { createRedisLatencyRecorder } from '../../edge/src/latency/redis-latency-store.ts'
import { startNodeEdge, type NodeEdge } from '../../edge/src/entries/node-server.ts'
import { startLocalUpstash, type LocalUpstash } from '../../infra/local/local-upstash.ts'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../shared/src/api-key.ts'
import { pollUntil, startGpuNode, type GpuNodeProcess } from '../node/gpu-node-process.ts'

const CHROMIUM = '/usr/bin/chromium'

/** The page's `document` as the predicates below use it (this file is compiled without the DOM library; predicates run in the page). */
interface PageDocument {
  querySelectorAll(selector: string): { length: number }
  querySelector(selector: string): { textContent: string | null } | null
}
const SECRET = 'zl-browser-edge-secret-0123456789'
const ADMIN = 'zl-browser-admin-token-0123456789'
/** DESIGN.md §9's local regions. */
const REGIONS = [
  { region: 'us-east', lat: 39.0, lon: -77.5 },
  { region: 'eu-west', lat: 53.3, lon: -6.3 },
  { region: 'ap-south', lat: 19.1, lon: 72.9 },
] as const
/** Requests per region: distinct counts, so a row showing another region's number is caught. */
const SENT: Record<string, number> = { 'us-east': 4, 'eu-west': 3, 'ap-south': 2 }
const SCREENSHOT = 'test-output/dashboard.png'

let upstash: LocalUpstash
let nodes: GpuNodeProcess[] = []
let edge: NodeEdge
let context: BrowserContext
let profileDir: string
let recorded = 0
const onRecord = new Set<() => void>()
let recorder: LatencyRecorder
const edgeLogs: Array<Record<string, unknown>> = []
let apiKey: string

describe('the dashboard in headless Chromium', () => {
  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (.ci/run does this)`)
    profileDir = mkdtempSync(join(tmpdir(), 'zl-chromium-'))
    // Chromium starts while Redis and the nodes do (each is seconds of a 2-core machine).
    const browser = chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
      viewport: { width: 1280, height: 900 },
    })
    try {
      upstash = await startLocalUpstash()
      nodes = await Promise.all(
        REGIONS.map((r) =>
          startGpuNode({
            env: {
              NODE_ID: `${r.region}-1`,
              REGION: r.region,
              REGION_LAT: String(r.lat),
              REGION_LON: String(r.lon),
              EDGE_SHARED_SECRET: SECRET,
              // This test's own Redis: the nodes heartbeat into it, the edge routes from it.
              UPSTASH_REDIS_REST_URL: upstash.restUrl,
              UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
              MAX_BATCH: '8',
            },
          }),
        ),
      )
    } finally {
      context = await browser
    }
    const redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false, enableAutoPipelining: false })
    recorder = createRedisLatencyRecorder(redis)
    const counted: LatencyRecorder = {
      async record(s) {
        await recorder.record(s)
        recorded++
        for (const w of [...onRecord]) w()
      },
    }
    const config = parseEdgeConfig({
      UPSTASH_REDIS_REST_URL: upstash.restUrl,
      UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
      EDGE_SHARED_SECRET: SECRET,
      ADMIN_TOKEN: ADMIN,
      EDGE_REGION: 'local',
      DEV_MODE: '1',
      DEFAULT_RPM: '100000',
      DEFAULT_TPM: '100000000',
    })
    edge = await startNodeEdge(config, { host: '127.0.0.1', port: 0 }, { overrides: { latency: counted, log: (line) => edgeLogs.push(line) } })
  })

  afterAll(async () => {
    await context?.close()
    if (profileDir) rmSync(profileDir, { recursive: true, force: true })
    await edge?.close()
    await Promise.all(nodes.map((n) => n.stop()))
    await upstash?.stop()
  })

  it('shows one chart series and one table row per region with the counts sent', async () => {
    const key = (apiKey = generateApiKey())
    const redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false })
    await redis.hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: 'browser', tenant: 'browser', name: '', rpm: 0, tpm: 0, models: ['*'], created: 0, disabled: false, priority: 'interactive' }))
    // Route only once the edge sees every node's heartbeat.
    await pollUntil(
      async () => ((await (await fetch(`${edge.url}/v1/regions`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as { nodes: Array<{ fresh: boolean }> }).nodes,
      (ns) => ns.filter((n) => n.fresh).length === REGIONS.length,
      'three fresh nodes in the registry',
    )

    const total = Object.values(SENT).reduce((a, b) => a + b, 0)
    const answered = await Promise.all(
      REGIONS.flatMap((r) =>
        Array.from({ length: SENT[r.region]! }, async (_, i) => {
          const res = await fetch(`${edge.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-zl-client-geo': `${r.lat},${r.lon}` },
            body: JSON.stringify({ model: nodes[0]!.model, messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 6, stream: i % 2 === 0 }),
          })
          await res.arrayBuffer()
          return [res.status, res.headers.get('x-zl-region')]
        }),
      ),
    )
    expect(answered).toEqual(REGIONS.flatMap((r) => Array(SENT[r.region]).fill([200, r.region])))
    await recordsReach(total)

    const page = await context.newPage()
    const problems: string[] = []
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`))
    page.on('console', (m) => (m.type() === 'error' || /Content.Security.Policy/i.test(m.text())) && problems.push(`console: ${m.text()}`))
    await page.goto(`${edge.url}/dashboard`)
    await page.fill('#token', ADMIN)
    await page.click('#auth button[type="submit"]')

    // Page-side expressions are strings: this file is compiled without the DOM library.
    const n = REGIONS.length
    // Function predicates (not strings): a string would be eval'd in the page, which its CSP forbids.
    await page.waitForFunction((count) => {
      const doc = (globalThis as unknown as { document: PageDocument }).document
      return doc.querySelectorAll('#regions tbody tr[data-region]').length === count && doc.querySelectorAll('#nodes tbody tr').length === count
    }, n)
    const rows = await regionRows(page)
    expect(rows).toEqual(Object.fromEntries(REGIONS.map((r) => [r.region, SENT[r.region]])))

    // The chart: one series per region and percentile, named in uPlot's legend.
    await page.waitForSelector('#chart canvas')
    const drawn = (await page.getAttribute('#chart', 'data-regions'))!.split(',').sort()
    expect(drawn).toEqual(REGIONS.map((r) => r.region).sort())
    const legend = await page.$$eval('#chart .u-legend .u-series .u-label', (els) => els.map((e) => e.textContent ?? ''))
    for (const r of REGIONS) expect(legend.filter((l) => l.startsWith(`${r.region} `)).sort()).toEqual([`${r.region} p50`, `${r.region} p95`, `${r.region} p99`])

    // The node table comes from the heartbeats: one row per node, none down or draining. (An idle
    // edge answers /v1/regions from its table cached at the previous call, so a slow machine may
    // show a beat older than 5 s as 'stale'.)
    const states = await page.$$eval('#nodes tbody tr', (trs) => trs.map((tr) => [tr.getAttribute('data-node'), tr.children[1]!.textContent, tr.children[2]!.textContent]))
    expect(states.map(([id, region]) => [id, region]).sort()).toEqual(REGIONS.map((r) => [`${r.region}-1`, r.region]).sort())
    for (const [, , state] of states) expect(['serving', 'stale']).toContain(state)

    // The token stays out of the URL (it is kept in this tab's sessionStorage and sent as a header).
    expect(page.url()).toBe(`${edge.url}/dashboard`)
    expect(await page.evaluate(`sessionStorage.getItem('zl-dashboard-token')`)).toBe(ADMIN)
    expect(problems).toEqual([])

    mkdirSync('test-output', { recursive: true })
    await page.screenshot({ path: SCREENSHOT, fullPage: true })
    if (process.env.UPDATE_SCREENSHOTS === '1') {
      // For the README only, after every assertion: 14 minutes of synthetic history (see
      // seedHistory) so the chart shows lines rather than this run's single minute.
      await seedHistory(recorder)
      await page.reload()
      await page.waitForFunction(() => {
        const doc = (globalThis as unknown as { document: PageDocument }).document
        return Number(doc.querySelector('#regions tbody tr[data-region="us-east"] td.requests')?.textContent) > 100
      })
      mkdirSync('docs', { recursive: true })
      await page.screenshot({ path: 'docs/dashboard.png', fullPage: true })
    }
    await page.close()
  })

  it('carries the client’s trace through the edge into both request logs', async () => {
    const traceId = '0af7651916cd43dd8448eb211c80319c'
    const requestId = `trace-${crypto.randomUUID()}`
    const res = await fetch(`${edge.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'x-zl-client-geo': '39.0,-77.5', 'x-request-id': requestId, traceparent: `00-${traceId}-b7ad6b7169203331-01` },
      body: JSON.stringify({ model: nodes[0]!.model, messages: [{ role: 'user', content: 'trace me' }], max_tokens: 4 }),
    })
    await res.arrayBuffer()
    // The edge's span (echoed to the client) is the node's parent: the same traceparent in both logs.
    const edgeSpan = res.headers.get('traceparent')!
    expect(edgeSpan).toMatch(new RegExp(`^00-${traceId}-(?!b7ad6b7169203331)[0-9a-f]{16}-01$`))
    // The node that served it (the client stands in us-east, but a loaded machine's queue estimates may route elsewhere: this test is about the trace).
    const region = res.headers.get('x-zl-region')!
    const served = nodes[REGIONS.findIndex((r) => r.region === region)]!
    const nodeLine = await served.waitForLog((l) => l.msg === 'request' && l.requestId === requestId)
    expect(nodeLine.traceparent).toBe(edgeSpan)
    await recordsReach(recorded + 1)
    const edgeLines = edgeLogs.filter((l) => l.requestId === requestId)
    expect(edgeLines).toHaveLength(1)
    expect(edgeLines[0]).toMatchObject({ msg: 'request', traceparent: edgeSpan, route: '/v1/chat/completions', status: 200, outcome: 'ok', region, tenant: 'browser' })
    expect(JSON.stringify(edgeLines[0])).not.toContain(apiKey)
    expect(JSON.stringify(nodeLine)).not.toContain('trace me')
  })
})

/** Resolves once the edge has stored `n` latency records (they are written after each response ends). */
function recordsReach(n: number, timeoutMs = 15_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (recorded < n) return
      onRecord.delete(check)
      clearTimeout(timer)
      resolve()
    }
    const timer = setTimeout(() => {
      onRecord.delete(check)
      reject(new Error(`only ${recorded} of ${n} latency records were stored`))
    }, timeoutMs)
    onRecord.add(check)
    check()
  })
}

/**
 * Synthetic samples for the 14 minutes before now, through the real recorder: per region a
 * base latency (farther regions slower, as from a client in us-east) with a long tail, and a
 * few errors. Used only for docs/dashboard.png.
 */
async function seedHistory(into: LatencyRecorder): Promise<void> {
  const base: Record<string, number> = { 'us-east': 35, 'eu-west': 110, 'ap-south': 230 }
  let seed = 7
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const minute = Math.floor(Date.now() / 60_000)
  const writes: Array<Promise<void>> = []
  for (let m = 14; m >= 1; m--) {
    for (const r of REGIONS) {
      for (let i = 0; i < 12; i++) {
        const ttfbMs = base[r.region]! * (0.8 + 0.4 * rand()) * (rand() < 0.06 ? 3 + 4 * rand() : 1) * (1 + 0.3 * Math.sin(m / 2))
        const error = rand() < 0.02
        writes.push(into.record({
          requestId: `seed-${m}-${r.region}-${i}`,
          endedAtMs: (minute - m) * 60_000 + i * 4_000,
          edge: 'local',
          nodeRegion: r.region,
          model: 'tiny',
          tenant: 'seed',
          status: error ? 503 : 200,
          outcome: error ? 'overloaded' : 'ok',
          ttfbMs,
          totalMs: ttfbMs + 400 + 400 * rand(),
          failovers: 0,
        }))
      }
    }
  }
  await Promise.all(writes)
}

/** Region → the request count its table row shows. */
async function regionRows(page: Page): Promise<Record<string, number>> {
  return page.$$eval('#regions tbody tr[data-region]', (trs) =>
    Object.fromEntries(trs.map((tr) => [tr.getAttribute('data-region'), Number(tr.querySelector('td.requests')!.textContent)])),
  )
}

