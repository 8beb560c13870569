/**
 * `npx tsx bench/probe/worker-memory.ts [--worker edge|bare] [--seconds 60] [--concurrency N | --rate 300]
 * [--no-inspector] [--snapshots] [--v8-flags '…'] [--gc-every S] [--idle-seconds 20]`: does workerd's
 * memory level off under a steady load, and is what grows our Worker's JS heap or the runtime?
 * The Worker runs on Miniflare as `npm start` runs it (infra/local/miniflare-edge.ts, its V8 flags
 * included unless `--v8-flags` says otherwise; `''`: none), in front of the instant upstream, with
 * the bridge and redis (bench/lib/pinned-rig.ts). Load: a closed loop of N clients, or Poisson
 * arrivals at `rate`, half streaming chats, half not, each with its own prompt. Every 5 s:
 * workerd's RSS and, over workerd's V8 inspector (off with `--no-inspector`, in case its own
 * bookkeeping is what grows), the isolate's heap as V8 reports it (Runtime.getHeapUsage: JS heap
 * used / total, embedder and backing-store bytes). After the load: `idle-seconds` still sampled
 * (does the runtime give memory back by itself?), then a forced full collection and the same
 * figures. `--snapshots`: heap snapshots after a warm-up and after the load, compared by
 * constructor (what of ours grows with the requests served). `--worker bare`:
 * bench/probe/bare-worker (a Worker that only proxies): the runtime's own growth, for comparison.
 * `--gc-every S`: a forced collection every S s during the load — the inspector's is V8's
 * memory-reducing one, which also drops compiled code: our Worker then served half the requests
 * per second, so it shows what V8 could reclaim, not a way to run.
 */
import { parseArgs } from 'node:util'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../infra/local/redis-process.ts'
import { BENCH_API_KEY, INSTANT_MODEL } from '../lib/bench-edge.ts'
import { startPinnedRig } from '../lib/pinned-rig.ts'
import { processTree, totalMiB } from '../lib/procs.ts'
import { startWranglerDev } from '../lib/services.ts'
import { leastSquaresSlope, poissonArrivals, round } from '../lib/stats.ts'
import { benchAgent, sendRequest } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop, openLoop } from '../load/generators.ts'
import { devtools, heapByConstructor, heapSnapshot } from '../lib/devtools.ts'

const { values } = parseArgs({ options: { worker: { type: 'string', default: 'edge' }, seconds: { type: 'string', default: '60' }, rate: { type: 'string', default: '300' }, concurrency: { type: 'string', default: '0' }, 'gc-every': { type: 'string', default: '0' }, 'idle-seconds': { type: 'string', default: '20' }, 'no-inspector': { type: 'boolean', default: false }, snapshots: { type: 'boolean', default: false }, 'v8-flags': { type: 'string' } } })
const bare = values.worker === 'bare'
const seconds = Number(values.seconds)
const rate = Number(values.rate)
const gcEveryS = Number(values['gc-every'])
const concurrency = Number(values.concurrency)
// workerd's V8 flags (`--v8-flags ''`: none); absent: the local edge's default (infra/local/miniflare-edge.ts).
const v8Flags = values['v8-flags']?.split(/\s+/).filter(Boolean)

interface HeapUsage { usedSize: number; totalSize: number; embedderHeapUsedSize?: number; backingStorageSize?: number }
const MiB = (b: number | undefined) => (b === undefined ? undefined : round(b / 2 ** 20, 1))

const rig = await startPinnedRig()
const agent = benchAgent({ connections: 2000 })
try {
  // The inspector's own bookkeeping could be what grows: `--no-inspector` measures RSS alone.
  const inspectorPort = values['no-inspector'] ? undefined : await freePort()
  const env = bare ? { UPSTREAM: rig.instant.url } : rig.edgeEnv
  const worker = rig.own(await startWranglerDev(env, { kind: 'miniflare', config: bare ? 'bench/probe/bare-worker/wrangler.toml' : 'wrangler.toml', name: `${values.worker}-worker`, ...(inspectorPort ? { inspectorPort } : {}), ...(v8Flags ? { v8Flags } : {}) }))
  const session = inspectorPort ? await devtools(inspectorPort) : undefined
  await session?.call('HeapProfiler.enable')
  const heap = async (): Promise<Partial<HeapUsage>> => (session ? session.call<HeapUsage>('Runtime.getHeapUsage') : {})
  let n = 0
  let inFlight = 0
  const send = async (signal: AbortSignal) => {
    inFlight++
    try {
      return await sendOne(signal)
    } finally {
      inFlight--
    }
  }
  const sendOne = (signal: AbortSignal) => {
    const stream = n++ % 2 === 0
    // The bare Worker forwards as is: the instant upstream checks no signature.
    return sendRequest({ origin: worker.url, dialect: 'openai-chat', body: buildBody('openai-chat', { model: INSTANT_MODEL, text: `memory ${n}`, maxTokens: 32, stream }), stream, headers: { authorization: `Bearer ${BENCH_API_KEY}` }, dispatcher: agent, timeoutMs: 30_000, signal })
  }
  const samples: Array<{ atS: number; rssMiB: number | null; processes: string; heapUsedMiB?: number; heapTotalMiB?: number; embedderMiB?: number; backingMiB?: number; sent: number; connections: number; inFlight: number }> = []
  const t0 = performance.now()
  const sample = async () => {
    const tree = processTree(worker.proc.pid)
    const h = await heap()
    samples.push({ atS: round((performance.now() - t0) / 1000, 1), rssMiB: totalMiB(tree.filter((p) => p.name === 'workerd')), processes: tree.map((p) => `${p.name} ${p.mib}`).join(', '), heapUsedMiB: MiB(h.usedSize), heapTotalMiB: MiB(h.totalSize), embedderMiB: MiB(h.embedderHeapUsedSize), backingMiB: MiB(h.backingStorageSize), sent: n, connections: Object.values(agent.stats).reduce((k, st) => k + Number(st.connected), 0), inFlight })
    console.log(JSON.stringify(samples.at(-1)))
  }
  // `--snapshots`: a heap snapshot after a warm-up (every cache of the isolate filled once) and
  // one after the load, compared by constructor: what of ours grows with the requests served.
  let before: Map<string, { count: number; bytes: number }> | undefined
  if (values.snapshots && session) {
    await closedLoop({ concurrency: 16, durationMs: 10_000, graceMs: 10_000, run: (_i, s) => send(s) })
    await sleep(3000)
    before = heapByConstructor(await heapSnapshot(session))
  }
  await sample()
  let gcs = 0
  const timer = setInterval(() => {
    void sample().catch(() => {})
  }, 5000)
  const gcTimer = gcEveryS > 0 && session ? setInterval(() => void session.call('HeapProfiler.collectGarbage').then(() => gcs++, () => {}), gcEveryS * 1000) : undefined
  const { results, endedAtMs } = concurrency > 0
    ? await closedLoop({ concurrency, durationMs: seconds * 1000, graceMs: 30_000, run: (_i, s) => send(s) })
    : await openLoop({ arrivalsMs: poissonArrivals(rate, Math.ceil(rate * seconds * 1.2) + 10, 23), deadlineMs: seconds * 1000, drainMs: 30_000, maxInFlight: 2000, run: (_i, s) => send(s) })
  if (gcTimer) clearInterval(gcTimer)
  await sample()
  const loadSamples = samples.length
  const statuses: Record<string, number> = {}
  const firstErrors = new Map<number, string>()
  for (const r of results) {
    if (!r) continue
    statuses[r.status] = (statuses[r.status] ?? 0) + 1
    if (r.status !== 200 && !firstErrors.has(r.status)) firstErrors.set(r.status, r.error ?? '')
  }
  // After the load: idle (still sampled: does the runtime give memory back by itself?), then a
  // forced full GC and what is left.
  await sleep(Number(values['idle-seconds']) * 1000)
  clearInterval(timer)
  if (session) {
    // V8 runs the inspector's collection as a task on the isolate's thread, which workerd pumps
    // only while the isolate serves something: a request at a time until it answers.
    let collected = false
    const gc = session.call('HeapProfiler.collectGarbage').then(() => void (collected = true))
    while (!collected) await Promise.race([gc, send(AbortSignal.timeout(10_000)).then(() => sleep(200))])
  }
  await sleep(2000)
  await sample()
  if (before && session) {
    const after = heapByConstructor(await heapSnapshot(session))
    const growth = [...after].map(([name, a]) => ({ name, count: a.count - (before.get(name)?.count ?? 0), bytes: a.bytes - (before.get(name)?.bytes ?? 0), countAfter: a.count }))
    const total = (m: Map<string, { bytes: number }>) => [...m.values()].reduce((n, e) => n + e.bytes, 0)
    console.log(`heap snapshots (after forced GC): ${MiB(total(before))} MiB after the warm-up, ${MiB(total(after))} MiB after ${n} requests; most grown:`)
    for (const g of growth.sort((a, b) => b.bytes - a.bytes).slice(0, 15)) console.log(`  ${g.name}: ${g.count >= 0 ? '+' : ''}${g.count} objects (${g.countAfter} now), ${g.bytes >= 0 ? '+' : ''}${g.bytes} bytes`)
  }
  const load = samples.slice(0, loadSamples).filter((s) => s.rssMiB !== null)
  const lastMinute = load.filter((s) => s.atS >= load.at(-1)!.atS - 60)
  const slope = (xs: typeof load, f: (s: (typeof load)[number]) => number | undefined) => round(60 * leastSquaresSlope(xs.map((s) => [s.atS, f(s) ?? NaN] as const)), 2)
  console.log(JSON.stringify({
    worker: values.worker, inspector: session !== undefined, v8Flags: v8Flags ?? 'default', ...(concurrency > 0 ? { concurrency } : { rate }), seconds, requests: n, statuses, firstErrors: Object.fromEntries(firstErrors), okPerS: round((statuses[200] ?? 0) / (endedAtMs / 1000), 1), forcedGcs: gcs,
    rssMiBPerMinLastMinute: slope(lastMinute, (s) => s.rssMiB ?? undefined),
    heapUsedMiBPerMinLastMinute: slope(lastMinute, (s) => s.heapUsedMiB),
    rssStart: samples[0]!.rssMiB, rssEndOfLoad: samples[loadSamples - 1]!.rssMiB, rssIdle: samples.at(-2)!.rssMiB, rssAfterGc: samples.at(-1)!.rssMiB,
    heapUsedStart: samples[0]!.heapUsedMiB, heapUsedEndOfLoad: samples[loadSamples - 1]!.heapUsedMiB, heapUsedAfterGc: samples.at(-1)!.heapUsedMiB,
  }))
  session?.close()
} finally {
  await agent.close()
  await rig.close()
}
