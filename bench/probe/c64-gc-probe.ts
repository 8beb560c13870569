/**
 * `npx tsx bench/probe/c64-gc-probe.ts [--rounds N] [--node-args=--max-semi-space-size=32] [--source]`:
 * where the pinned concurrency-64 p99 goes (edge-pinned.ts's c64 phase, issue 18): the Node edge
 * and the bare Hono passthrough each alone on core 0, the load generator, the instant upstream,
 * the bridge and redis on core 1, a closed loop of 64 clients for 2048 streaming requests per
 * target per round. Per round and target: TTFB p50 / p99, requests per second, CPU per request
 * (the process's /proc time), and its garbage collections during the round (bench/probe/gc-trace.ts):
 * time per request, count and mean pause by kind. `--node-args` goes to both proxies' node;
 * `--source` runs both from their TypeScript through tsx instead of built (services.ts).
 */
import { readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { BENCH_API_KEY, INSTANT_MODEL } from '../lib/bench-edge.ts'
import { startPinnedRig } from '../lib/pinned-rig.ts'
import { startBarePassthrough, startNodeEdge } from '../lib/services.ts'
import { percentile, round } from '../lib/stats.ts'
import { sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '3' }, 'node-args': { type: 'string', default: '' }, source: { type: 'boolean', default: false } } })
const nodeArgs = values['node-args']!.split(' ').filter(Boolean)
const preload = [join(import.meta.dirname, 'gc-trace.ts')]
const rig = await startPinnedRig()
const { agent } = rig
try {
  const gcOut = { edge: join(tmpdir(), `zl-gc-edge-${process.pid}.json`), bare: join(tmpdir(), `zl-gc-bare-${process.pid}.json`) }
  const edge = rig.own(await startNodeEdge({ ...rig.edgeEnv, GC_TRACE_OUT: gcOut.edge }, { cpus: '0', nodeArgs, preload, source: values.source }))
  // The passthrough's environment is its own; the preload reads GC_TRACE_OUT from this process's.
  process.env.GC_TRACE_OUT = gcOut.bare
  const bare = rig.own(await startBarePassthrough(rig.instant.url, { cpus: '0', nodeArgs, preload, source: values.source }))
  const targets = { edge, bare }
  const body = buildBody('openai-chat', { model: INSTANT_MODEL, text: 'hello', maxTokens: 1, stream: true })
  const send = (t: keyof typeof targets, signal?: AbortSignal) =>
    sendRequest({ origin: targets[t].url, dialect: 'openai-chat', body, stream: true, headers: t === 'edge' ? { authorization: `Bearer ${BENCH_API_KEY}` } : {}, dispatcher: agent, timeoutMs: 20_000, ...(signal ? { signal } : {}) })
  const gcEvents = async (t: keyof typeof targets) => {
    process.kill(targets[t].proc.pid, 'SIGUSR2')
    await targets[t].proc.waitFor((_l, j) => j?.msg === 'gc-trace written', 10_000)
    return JSON.parse(readFileSync(gcOut[t], 'utf8')) as Array<{ atMs: number; ms: number; kind: string }>
  }
  for (const t of ['edge', 'bare'] as const) {
    await closedLoop({ concurrency: 8, durationMs: 10_000, graceMs: 5000, run: (_i, s) => send(t, s) })
    await closedLoop({ concurrency: 64, durationMs: 30_000, graceMs: 5000, maxRequests: 1024, run: (_i, s) => send(t, s) })
  }
  for (let r = 0; r < Number(values.rounds); r++) {
    for (const t of ['edge', 'bare'] as const) {
      await gcEvents(t)
      const cpu0 = targets[t].proc.cpuSeconds()
      const run = await closedLoop<RequestRecord>({ concurrency: 64, durationMs: 60_000, graceMs: 5000, maxRequests: 2048, run: (_i, s) => send(t, s) })
      const cpuS = targets[t].proc.cpuSeconds() - cpu0
      const from = performance.timeOrigin + run.startedAt
      const gcs = (await gcEvents(t)).filter((g) => g.atMs >= from && g.atMs <= from + run.endedAtMs)
      const ok = run.results.filter((x) => x.status === 200 && !x.error && x.ttfbMs !== undefined)
      const ttfb = ok.map((x) => x.ttfbMs!)
      const byKind = Object.fromEntries([...new Set(gcs.map((g) => g.kind))].map((k) => {
        const of = gcs.filter((g) => g.kind === k)
        return [k, { count: of.length, mean_ms: round(of.reduce((a, g) => a + g.ms, 0) / of.length) }]
      }))
      console.log(JSON.stringify({
        round: r, target: t, requests: ok.length, failed: run.results.length - ok.length,
        ttfb_p50_ms: round(percentile(ttfb, 50)), ttfb_p99_ms: round(percentile(ttfb, 99)),
        requests_per_s: round((ok.length / run.endedAtMs) * 1000), cpu_ms_per_request: round((cpuS * 1000) / ok.length),
        gc_ms_per_request: round(gcs.reduce((a, g) => a + g.ms, 0) / ok.length), gc_share_of_wall: round(gcs.reduce((a, g) => a + g.ms, 0) / run.endedAtMs), gc: byKind,
      }))
    }
  }
} finally {
  await rig.close()
}
