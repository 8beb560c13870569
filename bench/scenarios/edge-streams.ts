/**
 * Edge streams: how token streams arrive through the local Workers edge, against the
 * Node edge, in the same run.
 *
 * - Streams at concurrency 8: eight 400-token streams (`ignore_eos`) sent at once; the client-side
 *   gap between consecutive text frames of every stream (bench/load/client.ts `gapsMs`); per
 *   round, p50 and max over all gaps; the figures are medians over rounds. Targets, order rotated
 *   per round: the Node edge, `npm start`'s default Workers edge (our Worker on Miniflare directly:
 *   no wrangler ProxyWorker in front), and as controls wrangler's dev engine (`--edge wrangler`,
 *   DevTools inspector off: the ProxyWorker hop), plain `wrangler dev` (inspector on: the set-up
 *   that stalled), and a Worker that only proxies (bench/rig/bare-worker/) under all of them — a
 *   stall it shows too is the runtime's, not ours.
 * - Concurrency 64: per round, each edge (order rotated) gets a closed loop of 64 clients for a
 *   fixed number of short streams; `wrangler_over_node_p99_c64` = p99 TTFB through the default
 *   Workers edge ÷ p99 TTFB through the Node edge, same requests, median over rounds. Plain
 *   `wrangler dev` and the bare Worker under the default set-up run the same loop;
 *   `wrangler_over_bare_worker_p99_c64` = ours ÷ the bare Worker's, same set-up: the share of the
 *   Workers edge's p99 that is our Worker's rather than the local runtime's.
 *
 * The caller (edge.ts) passes the node and the two edges it already runs; this file starts the
 * control set-ups and stops them.
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { signRequest } from '../../shared/src/signature.ts'
import { sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody, DIALECT_PATH } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'
import { chatPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startWranglerDev, type EdgeProc } from '../lib/services.ts'
import { median, percentile, round } from '../lib/stats.ts'
import type { Dispatcher } from 'undici'

const STREAM_TOKENS = 400
const STREAMS = 8
const C64_TOKENS = 32

export interface EdgeStreamsInput {
  ctx: BenchContext
  modelDir: string
  /** The GPU node: its URL, model id, and the edge secret that signs direct (bare Worker) requests. */
  node: { url: string; model: string }
  secret: string
  apiKey: string
  /** The edge's environment, for the plain `wrangler dev` control. */
  edgeEnv: Record<string, string>
  nodeEdgeUrl: string
  /** `npm start`'s default Workers edge, when it started. */
  wranglerUrl?: string
  dispatcher: Dispatcher
  /** The control set-ups to start (default all). */
  controls?: readonly ControlTarget[]
}

type ControlTarget = 'wrangler-inspector' | 'bare-wrangler' | 'bare-wrangler-inspector' | 'dev-engine' | 'bare-dev-engine'
type Target = 'node-edge' | 'wrangler' | ControlTarget
/** The bare Worker gets signed requests straight through to the node; the edges get the API key. */
const SIGNED: ReadonlySet<Target> = new Set(['bare-wrangler', 'bare-wrangler-inspector', 'bare-dev-engine'])

interface StreamRound {
  gap_p50_ms: number
  gap_max_ms: number
  /** Each stream's longest gap. */
  per_stream_max_ms: number[]
  total_ms_p50: number
  errors: number
  /** The first failed stream's error (status and body head), for diagnosis. */
  first_error?: string
}

export interface EdgeStreamsResult {
  figures: Record<string, number | null>
  raw: Record<string, unknown>
  notes: string[]
}

export async function runEdgeStreams(i: EdgeStreamsInput): Promise<EdgeStreamsResult> {
  const { ctx } = i
  const notes: string[] = []
  const started: EdgeProc[] = []
  try {
    const origins: Partial<Record<Target, string>> = { 'node-edge': i.nodeEdgeUrl, ...(i.wranglerUrl ? { wrangler: i.wranglerUrl } : {}) }
    ctx.log("edge streams: starting the controls (wrangler's dev engine, plain wrangler dev, and the bare proxy Worker under each and the default)")
    const bare = 'bench/rig/bare-worker/wrangler.toml'
    const controls: Array<[ControlTarget, () => Promise<EdgeProc>]> = [
      ['wrangler-inspector', () => startWranglerDev(i.edgeEnv, { kind: 'wrangler-inspector' })],
      ['bare-wrangler', () => startWranglerDev({ UPSTREAM: i.node.url }, { config: bare, name: 'bare-worker' })],
      ['bare-wrangler-inspector', () => startWranglerDev({ UPSTREAM: i.node.url }, { config: bare, name: 'bare-worker-inspector', kind: 'wrangler-inspector' })],
      // wrangler's dev engine (its ProxyWorker hop in front), our Worker and the bare one.
      ['dev-engine', () => startWranglerDev(i.edgeEnv, { kind: 'wrangler' })],
      ['bare-dev-engine', () => startWranglerDev({ UPSTREAM: i.node.url }, { config: bare, name: 'bare-dev-engine', kind: 'wrangler' })],
    ]
    for (const [t, start] of controls.filter(([t]) => !i.controls || i.controls.includes(t))) {
      try {
        const p = await start()
        started.push(p)
        origins[t] = p.url
      } catch (e) {
        notes.push(`edge streams: ${t} did not start: ${(e as Error).message.split('\n')[0]}`)
      }
    }
    const targets = (Object.keys(origins) as Target[]).filter((t) => origins[t])
    const prompt = chatPromptOfLength(i.modelDir, 32)
    const body = (maxTokens: number) => buildBody('openai-chat', { model: i.node.model, text: prompt.text, maxTokens, stream: true, ignoreEos: true })
    const longBody = body(STREAM_TOKENS)
    const shortBody = body(C64_TOKENS)
    let reqNo = 0
    const send = async (t: Target, b: Uint8Array, signal?: AbortSignal): Promise<RequestRecord> => {
      let headers: Record<string, string>
      if (SIGNED.has(t)) {
        const requestId = `bench-streams-${process.pid}-${reqNo++}`
        headers = { 'x-request-id': requestId, 'x-zl-signature': await signRequest({ secret: i.secret, method: 'POST', path: DIALECT_PATH['openai-chat'], requestId, body: b, nowMs: Date.now() }) }
      } else {
        headers = { authorization: `Bearer ${i.apiKey}` }
      }
      return sendRequest({ origin: origins[t]!, dialect: 'openai-chat', body: b, stream: true, headers, dispatcher: i.dispatcher, timeoutMs: 120_000, ...(signal ? { signal } : {}) })
    }

    // Warm-up: connections, key cache, JIT of each set-up.
    for (const t of targets) await closedLoop({ concurrency: STREAMS, durationMs: 30_000, graceMs: 10_000, maxRequests: ctx.quick ? 16 : 64, run: (_n, s) => send(t, shortBody, s) })

    const streamRounds = ctx.quick ? 1 : 3
    const streams: Partial<Record<Target, StreamRound[]>> = {}
    for (let r = 0; r < streamRounds; r++) {
      for (const t of rotate(targets, r)) {
        const recs = await Promise.all(Array.from({ length: STREAMS }, () => send(t, longBody)))
        const ok = recs.filter((x) => x.status === 200 && !x.error)
        const gaps = ok.flatMap((x) => x.gapsMs)
        const row: StreamRound = {
          gap_p50_ms: round(percentile(gaps, 50)),
          gap_max_ms: round(Math.max(0, ...gaps)),
          per_stream_max_ms: ok.map((x) => round(Math.max(0, ...x.gapsMs), 1)),
          total_ms_p50: round(percentile(ok.map((x) => x.totalMs), 50)),
          errors: recs.length - ok.length,
        }
        const failed = recs.find((x) => x.status !== 200 || x.error)
        if (failed) row.first_error = (failed.error ?? `HTTP ${failed.status}`).slice(0, 200)
        ;(streams[t] ??= []).push(row)
        ctx.log(`streams c${STREAMS} round ${r + 1}/${streamRounds}, ${t}: frame gap p50 ${row.gap_p50_ms.toFixed(1)} ms, max ${row.gap_max_ms.toFixed(0)} ms, stream total p50 ${row.total_ms_p50.toFixed(0)} ms${row.errors ? `, ${row.errors} errors` : ''}`)
        await sleep(200)
      }
    }

    const c64Rounds = ctx.quick ? 1 : 5
    const c64Requests = ctx.quick ? 128 : 384
    // The bare Worker under the default set-up too: the runtime's own p99, beside ours.
    const c64Targets = targets.filter((t) => t !== 'bare-wrangler-inspector')
    const c64: Partial<Record<Target, Array<{ ttfb_p50_ms: number; ttfb_p99_ms: number; ok: number; errors: number; wall_s: number }>>> = {}
    const ratios: number[] = []
    const devEngineRatios: number[] = []
    // Ours ÷ a Worker that only proxies, under the same set-up: what our Worker adds to the runtime's own p99.
    const overBare: number[] = []
    for (let r = 0; r < c64Rounds; r++) {
      const p99: Partial<Record<Target, number>> = {}
      for (const t of rotate(c64Targets, r)) {
        const t0 = performance.now()
        const run = await closedLoop<RequestRecord>({ concurrency: 64, durationMs: 60_000, graceMs: 10_000, maxRequests: c64Requests, run: (_n, s) => send(t, shortBody, s) })
        const ok = run.results.filter((x) => x.status === 200 && !x.error && !x.cutOff && x.ttfbMs !== undefined)
        const ttfb = ok.map((x) => x.ttfbMs!)
        p99[t] = percentile(ttfb, 99)
        ;(c64[t] ??= []).push({ ttfb_p50_ms: round(percentile(ttfb, 50)), ttfb_p99_ms: round(p99[t]!), ok: ok.length, errors: run.results.length - ok.length, wall_s: round((performance.now() - t0) / 1000) })
        await sleep(200)
      }
      if (p99.wrangler !== undefined && p99['node-edge']) ratios.push(p99.wrangler / p99['node-edge'])
      if (p99['dev-engine'] !== undefined && p99['node-edge']) devEngineRatios.push(p99['dev-engine'] / p99['node-edge'])
      if (p99.wrangler !== undefined && p99['bare-wrangler']) overBare.push(p99.wrangler / p99['bare-wrangler'])
      ctx.log(`c64 round ${r + 1}/${c64Rounds}: TTFB p99 ${c64Targets.map((t) => `${t} ${p99[t]?.toFixed(0)} ms`).join(', ')}`)
    }
    for (const [t, rows] of Object.entries(c64)) {
      const errors = rows.reduce((a, x) => a + x.errors, 0)
      if (errors) notes.push(`edge streams c64, ${t}: ${errors} requests failed or were cut off and are left out of the percentiles`)
    }
    for (const [t, rows] of Object.entries(streams)) {
      const failed = rows.filter((x) => x.errors)
      if (failed.length) notes.push(`edge streams c8, ${t}: ${failed.reduce((a, x) => a + x.errors, 0)} streams failed and are left out of the gaps (first: ${failed[0]!.first_error})`)
    }

    const med = (t: Target, f: (x: StreamRound) => number) => (streams[t]?.length ? round(median(streams[t]!.map(f))) : null)
    const wranglerMax = med('wrangler', (x) => x.gap_max_ms)
    const nodeMax = med('node-edge', (x) => x.gap_max_ms)
    return {
      figures: {
        wrangler_stream_gap_max_ms_c8: wranglerMax,
        node_stream_gap_max_ms_c8: nodeMax,
        wrangler_stream_gap_p50_ms_c8: med('wrangler', (x) => x.gap_p50_ms),
        node_stream_gap_p50_ms_c8: med('node-edge', (x) => x.gap_p50_ms),
        wrangler_stream_gap_max_over_node_c8: wranglerMax !== null && nodeMax ? round(wranglerMax / nodeMax) : null,
        wrangler_over_node_p99_c64: ratios.length ? round(median(ratios)) : null,
        wrangler_over_bare_worker_p99_c64: overBare.length ? round(median(overBare)) : null,
      },
      raw: {
        method: `${STREAMS} concurrent ${STREAM_TOKENS}-token streams (ignore_eos) per target per round, ${streamRounds} rounds; c64: closed loop of 64 clients, ${c64Requests} ${C64_TOKENS}-token streams per target per round, ${c64Rounds} rounds`,
        set_ups: {
          'node-edge': 'edge/src/entries/node.ts',
          wrangler: "npm start's default: Miniflare's API directly on wrangler's build and config (infra/local/miniflare-edge-cli.ts)",
          'wrangler-inspector': 'plain `wrangler dev` (inspector on), the first default',
          'bare-wrangler': 'bench/rig/bare-worker (return fetch(upstream)) under the default set-up',
          'bare-wrangler-inspector': 'the bare Worker under plain `wrangler dev`',
          'dev-engine': "wrangler's dev engine (unstable_startWorker), DevTools inspector off (infra/local/wrangler-dev-cli.ts): `--edge wrangler`, npm start's default until 2026-12-04",
          'bare-dev-engine': "the bare Worker under wrangler's dev engine",
        },
        streams_c8: Object.fromEntries(Object.entries(streams).map(([t, rows]) => [t, { gap_p50_ms: round(median(rows.map((x) => x.gap_p50_ms))), gap_max_ms: round(median(rows.map((x) => x.gap_max_ms))), rounds: rows }])),
        c64: Object.fromEntries(Object.entries(c64).map(([t, rows]) => [t, { ttfb_p99_ms: round(median(rows.map((x) => x.ttfb_p99_ms))), rounds: rows }])),
        wrangler_over_node_p99_c64_per_round: ratios.map((x) => round(x)),
        dev_engine_over_node_p99_c64_per_round: devEngineRatios.map((x) => round(x)),
        dev_engine_over_node_p99_c64: devEngineRatios.length ? round(median(devEngineRatios)) : null,
        dev_engine_stream_gap_max_over_node_c8: (() => {
          const m = med('dev-engine', (x) => x.gap_max_ms)
          return m !== null && nodeMax ? round(m / nodeMax) : null
        })(),
        wrangler_over_bare_worker_p99_c64_per_round: overBare.map((x) => round(x)),
      },
      notes,
    }
  } finally {
    for (const p of started.reverse()) await p.stop().catch(() => {})
  }
}

function rotate<T>(xs: readonly T[], by: number): T[] {
  const k = by % xs.length
  return [...xs.slice(k), ...xs.slice(0, k)]
}
