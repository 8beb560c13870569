/**
 * The edge measured the fair way: the proxy under test —
 * the Node edge (its node is in its own region: HTTP/1.1), the bare Hono passthrough (over an
 * HTTP/1.1 pool, and over one h2c connection as the edge reaches other regions' nodes), nginx (Debian's nginx-light, the absolute floor) —
 * each pinned to core 0, the load generator and the instant upstream (and the limiter's bridge
 * and redis) on core 1, as a separate machine would place them. Same requests through each: a
 * streaming OpenAI chat request to the instant upstream (role, one text chunk, finish, usage),
 * auth + both rate limits + validation on through the edge. Figures are differences in one run:
 * the edge's added TTFB minus the bare passthrough's (each of its two upstream protocols), and
 * nginx's own added TTFB (the floor).
 *
 * - Concurrency 1: each iteration sends the request directly and through every proxy (order
 *   rotated); per round, added = p50(proxy) − p50(direct); the figure is the median over rounds
 *   of added(edge) − added(bare).
 * - Concurrency 64: per round, each target (order rotated) gets a closed loop of 64 clients for a
 *   fixed number of requests; added = p99(proxy) − p99(direct); the figure is the median over
 *   rounds of added(edge) − added(bare).
 * Only one proxy is loaded at a time, so each has core 0 to itself while it is measured.
 */
import { performance } from 'node:perf_hooks'
import { benchAgent, sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'
import { nginxBinary, startNginx } from '../lib/nginx.ts'
import { hasTaskset, pinSelf } from '../lib/procs.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startBarePassthrough, startNodeEdge, type EdgeProc } from '../lib/services.ts'
import { median, percentile, round, summarize } from '../lib/stats.ts'

export interface PinnedEdgeInput {
  /** The edge environment, with the instant upstream among its nodes serving `model`. */
  edgeEnv: Record<string, string>
  instantUrl: string
  model: string
  apiKey: string
}

export interface PinnedEdgeResult {
  figures: Record<string, number | null>
  raw: Record<string, unknown>
  notes: string[]
}

type Target = 'direct' | 'edge' | 'bare' | 'bare_h2' | 'nginx'

export async function runPinnedEdge(ctx: BenchContext, input: PinnedEdgeInput): Promise<PinnedEdgeResult> {
  const notes: string[] = []
  const pinned = hasTaskset()
  if (!pinned) notes.push('pinned edge: taskset is missing, so nothing is pinned (the figures are then not the fair method)')
  const core0 = pinned ? { cpus: '0' } : {}
  const started: EdgeProc[] = []
  const agent = benchAgent()
  const unpinSelf = pinned ? pinSelf('1') : () => {}
  try {
    const edge = await startNodeEdge(input.edgeEnv, core0)
    started.push(edge)
    const bare = await startBarePassthrough(input.instantUrl, core0)
    started.push(bare)
    // The same passthrough over one h2c connection, the way the edge reaches other regions'
    // nodes: what HTTP/2 costs, apart from what our logic adds.
    const bareH2 = await startBarePassthrough(input.instantUrl, { ...core0, h2: true })
    started.push(bareH2)
    let nginx: EdgeProc | undefined
    if (nginxBinary()) {
      nginx = await startNginx(input.instantUrl, core0)
      started.push(nginx)
    } else {
      notes.push('pinned edge: nginx is not installed (apt-get install -y nginx-light), so there is no nginx floor in this run')
    }
    const origins: Partial<Record<Target, string>> = { direct: input.instantUrl, edge: edge.url, bare: bare.url, bare_h2: bareH2.url, ...(nginx ? { nginx: nginx.url } : {}) }
    const targets = Object.keys(origins) as Target[]
    const body = buildBody('openai-chat', { model: input.model, text: 'hello', maxTokens: 1, stream: true })
    const send = (t: Target, signal?: AbortSignal) =>
      sendRequest({ origin: origins[t]!, dialect: 'openai-chat', body, stream: true, headers: t === 'edge' ? { authorization: `Bearer ${input.apiKey}` } : {}, dispatcher: agent, timeoutMs: 20_000, ...(signal ? { signal } : {}) })

    // Warm-up at both concurrencies until V8 has compiled each proxy's path (see edge.ts).
    const t0 = performance.now()
    for (const t of targets) {
      await closedLoop({ concurrency: 8, durationMs: ctx.quick ? 3000 : 10_000, graceMs: 5000, run: (_i, s) => send(t, s) })
      await closedLoop({ concurrency: 64, durationMs: 30_000, graceMs: 5000, maxRequests: ctx.quick ? 256 : 1024, run: (_i, s) => send(t, s) })
    }
    ctx.log(`pinned: warm-up of ${targets.join(', ')} (${((performance.now() - t0) / 1000).toFixed(1)} s)`)

    const proxies = targets.filter((t) => t !== 'direct') as Array<Exclude<Target, 'direct'>>
    const c1Rounds = ctx.quick ? 3 : 5
    const c1Iters = ctx.quick ? 40 : 150
    const c1Added: Record<string, number[]> = Object.fromEntries(proxies.map((p) => [p, []]))
    const c1All: Record<string, RequestRecord[]> = Object.fromEntries(targets.map((t) => [t, []]))
    for (let r = 0; r < c1Rounds; r++) {
      const recs: Record<string, RequestRecord[]> = Object.fromEntries(targets.map((t) => [t, []]))
      for (let i = 0; i < c1Iters; i++) for (const t of rotate(targets, i + r)) recs[t]!.push(await send(t))
      const p50 = (t: Target) => percentile(ttfbs(recs[t]!), 50)
      for (const p of proxies) c1Added[p]!.push(p50(p) - p50('direct'))
      for (const t of targets) c1All[t]!.push(...recs[t]!)
      ctx.log(`pinned c1 round ${r + 1}/${c1Rounds}: direct TTFB p50 ${p50('direct').toFixed(2)} ms; added: ${proxies.map((p) => `${p} +${c1Added[p]!.at(-1)!.toFixed(2)}`).join(', ')} ms`)
    }

    const c64Rounds = ctx.quick ? 4 : 16
    const c64Requests = ctx.quick ? 512 : 2048
    const c64Added: Record<string, number[]> = Object.fromEntries(proxies.map((p) => [p, []]))
    const c64All: Record<string, RequestRecord[]> = Object.fromEntries(targets.map((t) => [t, []]))
    for (let r = 0; r < c64Rounds; r++) {
      const p99: Partial<Record<Target, number>> = {}
      for (const t of rotate(targets, r)) {
        const run = await closedLoop<RequestRecord>({ concurrency: 64, durationMs: 60_000, graceMs: 5000, maxRequests: c64Requests, run: (_i, s) => send(t, s) })
        c64All[t]!.push(...run.results)
        p99[t] = percentile(ttfbs(run.results), 99)
      }
      for (const p of proxies) c64Added[p]!.push(p99[p]! - p99.direct!)
      ctx.log(`pinned c64 round ${r + 1}/${c64Rounds}: direct TTFB p99 ${p99.direct!.toFixed(2)} ms; added: ${proxies.map((p) => `${p} +${c64Added[p]!.at(-1)!.toFixed(2)}`).join(', ')} ms`)
    }

    for (const [phase, all] of [['c1', c1All], ['c64', c64All]] as const) {
      for (const t of targets) {
        const bad = all[t]!.filter((x) => x.status !== 200 || x.error)
        if (bad.length) notes.push(`pinned ${phase}, ${t}: ${bad.length} of ${all[t]!.length} requests failed (first: ${bad[0]!.error ?? `HTTP ${bad[0]!.status}`})`.slice(0, 300))
      }
    }
    const minus = (a: number[], b: number[]) => a.map((x, i) => x - b[i]!)
    const describe = (recs: RequestRecord[]) => ({ requests: recs.length, ttfb_ms: summarize(ttfbs(recs)) })
    return {
      figures: {
        pinned_added_ttfb_p50_c1_minus_bare_ms: round(median(minus(c1Added.edge!, c1Added.bare!))),
        pinned_added_ttfb_p99_c64_minus_bare_ms: round(median(minus(c64Added.edge!, c64Added.bare!))),
        nginx_added_ttfb_p50_c1_ms: nginx ? round(median(c1Added.nginx!)) : null,
        pinned_added_ttfb_p50_c1_minus_bare_h2_ms: round(median(minus(c1Added.edge!, c1Added.bare_h2!))),
        pinned_added_ttfb_p99_c64_minus_bare_h2_ms: round(median(minus(c64Added.edge!, c64Added.bare_h2!))),
      },
      raw: {
        placement: pinned ? 'proxy under test on core 0 (one loaded at a time); load generator, instant upstream, bridge and redis on core 1' : 'not pinned (no taskset)',
        request: 'streaming OpenAI chat to the instant upstream (5 SSE frames); through the edge: auth, requests/min and tokens/min, validation, signing',
        c1: { rounds: c1Rounds, iterations_per_round: c1Iters, added_ttfb_p50_per_round: roundAll(c1Added), ...Object.fromEntries(targets.map((t) => [t, describe(c1All[t]!)])) },
        c64: { rounds: c64Rounds, requests_per_round: c64Requests, added_ttfb_p99_per_round: roundAll(c64Added), ...Object.fromEntries(targets.map((t) => [t, describe(c64All[t]!)])) },
        edge_added_ttfb_p50_c1_ms: round(median(c1Added.edge!)),
        bare_added_ttfb_p50_c1_ms: round(median(c1Added.bare!)),
        edge_added_ttfb_p99_c64_ms: round(median(c64Added.edge!)),
        bare_added_ttfb_p99_c64_ms: round(median(c64Added.bare!)),
        bare_h2_added_ttfb_p50_c1_ms: round(median(c1Added.bare_h2!)),
        bare_h2_added_ttfb_p99_c64_ms: round(median(c64Added.bare_h2!)),
        ...(nginx ? { nginx_added_ttfb_p99_c64_ms: round(median(c64Added.nginx!)) } : {}),
      },
      notes,
    }
  } finally {
    unpinSelf()
    await agent.close()
    for (const s of started.reverse()) await s.stop().catch(() => {})
  }
}

function ttfbs(recs: RequestRecord[]): number[] {
  const out: number[] = []
  for (const r of recs) if (r.status === 200 && !r.error && !r.cutOff && r.ttfbMs !== undefined) out.push(r.ttfbMs)
  return out
}

function roundAll(m: Record<string, number[]>): Record<string, number[]> {
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, v.map((x) => round(x))]))
}

function rotate<T>(xs: readonly T[], by: number): T[] {
  const k = by % xs.length
  return [...xs.slice(k), ...xs.slice(0, k)]
}
