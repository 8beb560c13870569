/**
 * A measurement (not a test): a bounded overload of the local stack through the
 * edge. `npx tsx bench/overload.ts [--seconds 60] [--factor 3] [--edge wrangler|miniflare|wrangler-inspector|node] [--regions 3] [--queue-wait-ms 10000] [--node-nice 10]`
 *
 * 1. capacity: a closed loop of 8 clients for 10 s measures the stack's request rate R;
 * 2. overload: Poisson arrivals at factor × R for `seconds` (non-streaming and streaming chat,
 *    32 tokens each), in-flight bounded so the client's own memory stays bounded;
 * 3. afterwards: every node must drop to zero running and waiting sequences.
 * It reports statuses (only 200 and fast 503/529 carrying retry-after-ms are expected), how fast
 * the refusals came, and the RSS of the edge (its whole process tree: wrangler + workerd) and of
 * each node every 5 s, and the figure `overload.edge_rss_mib_per_min_last_minute`: how fast the
 * edge's RSS still rose over the overload's last minute (≈ 0 when its memory levels off; needs
 * `--seconds` ≥ 60). Writes bench/results/overload-<time>.json (the figure under `overload`, as
 * latest.json holds a section's; this tool is not a section of `npm run bench`, so latest.json
 * does not carry it) and prints a markdown summary.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { DEFAULT_EDGE_KIND, EDGE_KINDS } from '../infra/local/stack-config.ts'
import { pollUntil, startTestStack } from '../test/e2e/support/stack.ts'
import { benchAgent, sendRequest, type RequestRecord } from './load/client.ts'
import { buildBody } from './load/dialects.ts'
import { closedLoop, openLoop } from './load/generators.ts'
import { processTree, totalMiB } from './lib/procs.ts'
import { percentile, poissonArrivals, round, slopeOverLast } from './lib/stats.ts'

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '60' }, factor: { type: 'string', default: '3' }, edge: { type: 'string', default: DEFAULT_EDGE_KIND }, regions: { type: 'string', default: '3' }, 'queue-wait-ms': { type: 'string', default: '10000' }, 'node-nice': { type: 'string', default: '10' } } })
const seconds = Number(values.seconds)
const factor = Number(values.factor)
const edgeKind = EDGE_KINDS.find((k) => k === values.edge) ?? DEFAULT_EDGE_KIND

/** How often the processes' RSS is read: a 60 s window holds 13 samples. */
const SAMPLE_EVERY_MS = 5000
const SLOPE_WINDOW_S = 60

/**
 * MiB per minute by which the edge's RSS rose over the overload's last minute (a least-squares
 * line through the samples taken in it, the deadline's included): ≈ 0 once its memory has
 * levelled off. null when the overload was shorter than the window.
 */
function edgeRssSlope(samples: ReadonlyArray<{ atS: number; edgeMiB: number | null }>, overloadS: number): number | null {
  if (overloadS < SLOPE_WINDOW_S) return null
  const slope = 60 * slopeOverLast(samples.filter((s) => s.edgeMiB !== null).map((s) => [s.atS, s.edgeMiB!] as const), overloadS, SLOPE_WINDOW_S)
  return Number.isFinite(slope) ? round(slope, 2) : null
}

// The nodes bound the wait they queue (MAX_QUEUE_WAIT_MS, off by default): overload is answered, not queued.
// No rebuild when the sources change while it runs: one restarts workerd mid-measurement.
const stack = await startTestStack({ regions: Number(values.regions), edge: edgeKind, nodeVars: { MAX_QUEUE_WAIT_MS: values['queue-wait-ms']! }, nodeNice: Number(values['node-nice']), edgeWatch: false })
// One connection per request in flight (MAX_IN_FLIGHT): an arrival is sent when it arrives. With
// 256 connections, arrivals beyond them queued in this client's pool (measured: client TTFB p50
// 14.9 s where the edge's own code took 185 ms), so the stack never saw the overload it was sent.
const MAX_IN_FLIGHT = 2000
const dispatcher = benchAgent({ connections: MAX_IN_FLIGHT })
const headers = { authorization: `Bearer ${stack.devApiKey}` }
let seq = 0
const one = (signal?: AbortSignal): Promise<RequestRecord> => {
  const stream = seq++ % 2 === 0
  return sendRequest({ origin: stack.edgeUrl, dialect: 'openai-chat', body: buildBody('openai-chat', { model: stack.model, text: `overload ${seq}`, maxTokens: 32, stream, ignoreEos: true }), stream, headers, dispatcher, timeoutMs: 30_000, ...(signal ? { signal } : {}) })
}

try {
  process.stdout.write('capacity: 8 clients for 10 s… ')
  const cap = await closedLoop({ concurrency: 8, durationMs: 10_000, graceMs: 30_000, run: (_i, signal) => one(signal) })
  const okCap = cap.results.filter((r) => r.status === 200).length
  const rate = okCap / (cap.endedAtMs / 1000)
  console.log(`${rate.toFixed(1)} req/s`)

  const rssSamples: Array<{ atS: number; edgeMiB: number | null; edgeProcessesMiB: string; nodesMiB: Record<string, number | null>; cpuS: Record<string, number>; clientConnections: number }> = []
  const sample = () => {
    const edge = processTree(stack.running.supervisor.pid('edge'))
    const nodes = stack.regions.map((r) => [r.name, processTree(stack.nodePid(r.name))] as const)
    // CPU seconds so far, by process: which one saturated the machine (the edge's runtime, the nodes, the load generator).
    const usage = process.cpuUsage()
    const cpuS: Record<string, number> = { client: (usage.user + usage.system) / 1e6 }
    for (const p of edge) cpuS[`edge ${p.name}`] = (cpuS[`edge ${p.name}`] ?? 0) + p.cpuS
    for (const [name, tree] of nodes) cpuS[name] = tree.reduce((n, p) => n + p.cpuS, 0)
    for (const svc of ['redis', 'upstash-bridge']) cpuS[svc] = processTree(stack.running.supervisor.pid(svc)).reduce((n, p) => n + p.cpuS, 0)
    rssSamples.push({
      cpuS,
      // Connections this client holds open to the edge (up to MAX_IN_FLIGHT), beside its RSS.
      clientConnections: Object.values(dispatcher.stats).reduce((n, st) => n + Number(st.connected), 0),
      atS: round((performance.now() - t0) / 1000, 1),
      edgeMiB: totalMiB(edge),
      // Which of the edge's processes grows (wrangler's node, its workerd instances, esbuild).
      edgeProcessesMiB: edge.map((p) => `${p.name} ${p.mib}`).join(', '),
      nodesMiB: Object.fromEntries(nodes.map(([name, tree]) => [name, totalMiB(tree)])),
    })
  }
  const t0 = performance.now()
  sample()
  const timer = setInterval(sample, SAMPLE_EVERY_MS)
  // One sample at the deadline closes the last minute's window (edgeRssSlope).
  const atDeadline = setTimeout(sample, seconds * 1000)
  console.log(`overload: ${(rate * factor).toFixed(1)} req/s (${factor}×) for ${seconds} s…`)
  const arrivals = poissonArrivals(rate * factor, Math.ceil(rate * factor * seconds * 1.2) + 10, 17)
  const run = await openLoop({ arrivalsMs: arrivals, deadlineMs: seconds * 1000, drainMs: 30_000, maxInFlight: MAX_IN_FLIGHT, run: (_i, signal) => one(signal) })
  clearInterval(timer)
  clearTimeout(atDeadline)
  sample()

  const done = run.results.filter((r): r is RequestRecord => r !== undefined)
  const [first, last] = [rssSamples[0]!, rssSamples.at(-1)!]
  const cores = Object.fromEntries(Object.keys(last.cpuS).map((k) => [k, Number(((last.cpuS[k]! - (first.cpuS[k] ?? 0)) / Math.max(1, last.atS - first.atS)).toFixed(2))]))
  const byStatus: Record<string, number> = {}
  for (const r of done) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1
  const refused = done.filter((r) => r.status === 503 || r.status === 529)
  const refusedMs = refused.map((r) => r.totalMs)
  const withRetryHint = refused.filter((r) => r.retryAfterMs !== undefined).length
  // Who answered a refusal without the hint (not the edge: its own carry one): the first few bodies.
  const withoutHint = refused.filter((r) => r.retryAfterMs === undefined).slice(0, 3).map((r) => r.error)
  // Each node's metrics at the end of the run, scraped once for what follows.
  const endMetrics = await Promise.all(stack.regions.map((r) => stack.metrics(r.name)))
  // What the nodes' memory holds at the end: the prefix cache fills up to its own budget
  // (PREFIX_CACHE_MB), beside the KV budget, so a node's RSS climbs to that bound and stops.
  const prefixCache = Object.fromEntries(stack.regions.map((r, i) => {
    const m = endMetrics[i]!
    return [r.name, { bytesMiB: Math.round((m.value('zl_prefix_cache_bytes') ?? 0) / 2 ** 20), capacityMiB: Math.round((m.value('zl_prefix_cache_capacity_bytes') ?? 0) / 2 ** 20) }] as const
  }))
  // How long admitted requests queued at the nodes, against the bound they admit by
  // (MAX_QUEUE_WAIT_MS): an estimate that understates the wait shows here as requests over it.
  // The whole time at the node (arrival to finish) against the client's: the rest was spent
  // before a node saw the request or after it answered (the edge, the sockets in between).
  const queueMs = Number(values['queue-wait-ms'])
  const overAtNodes = (name: string) => {
    const out = { count: 0, overBound: 0, over2xBound: 0 }
    for (const m of endMetrics) {
      const le = (bound: number) => m.series(`${name}_bucket`).filter((x) => Number(x.labels.le) >= bound / 1000).reduce((lo, x) => Math.min(lo, x.value), Infinity)
      const count = m.value(`${name}_count`)
      out.count += count
      out.overBound += count - le(queueMs)
      out.over2xBound += count - le(2 * queueMs)
    }
    return out
  }
  const queued = { queue: overAtNodes('zl_request_queue_time_seconds'), wholeRequest: overAtNodes('zl_e2e_request_latency_seconds') }
  const served = done.filter((r) => r.status === 200)
  const clientOver = (bound: number) => served.filter((r) => r.totalMs > bound).length + done.filter((r) => r.status === 0).length
  const clientSide = { served: served.length, overBound: clientOver(queueMs), over2xBound: clientOver(2 * queueMs), streamHeadersP99Ms: percentile(served.filter((r) => r.textFrames > 0 && r.headersMs !== undefined).map((r) => r.headersMs!), 99), ttfbP50Ms: percentile(served.map((r) => r.ttfbMs ?? r.totalMs), 50), ttfbP99Ms: percentile(served.map((r) => r.ttfbMs ?? r.totalMs), 99) }
  const idle = await Promise.all(stack.regions.map(async (r) => {
    const m = await pollUntil(() => stack.metrics(r.name), (x) => x.value('zl_num_requests_running') === 0 && x.value('zl_num_requests_waiting') === 0, `${r.name} idle`, 60_000).catch(() => undefined)
    return [r.name, m ? 'idle' : 'still busy after 60 s'] as const
  }))
  // What answered the refusals and the failures: the edge's own log lines (by outcome), and the
  // client's errors for requests that got no status.
  const edgeLog = readFileSync(stack.running.supervisor.logFile('edge'), 'utf8').split('\n')
  const edgeRefusals: Record<string, number> = {}
  // How long the edge's own code took over its refusals: against the client's view, the rest is
  // time spent before the app saw the request (queued in the runtime in front of it).
  const edgeRefusalMs: number[] = []
  // And over the requests it served: a client's wait far above this was spent before the app saw the request.
  const edgeServedTtfbMs: number[] = []
  for (const line of edgeLog) {
    const served = /"status":200,.*"ttfbMs":(\d+)/.exec(line)
    if (served) edgeServedTtfbMs.push(Number(served[1]))
    const m = /"status":(5\d\d),"outcome":"([a-z_]+)"/.exec(line)
    if (m) edgeRefusals[`${m[1]} ${m[2]}`] = (edgeRefusals[`${m[1]} ${m[2]}`] ?? 0) + 1
    const total = m && /"durationMs":(\d+)/.exec(line)
    if (total && (m[1] === '503' || m[1] === '529')) edgeRefusalMs.push(Number(total[1]))
  }
  const edgeServed = { count: edgeServedTtfbMs.length, ttfbP50Ms: percentile(edgeServedTtfbMs, 50), ttfbP99Ms: percentile(edgeServedTtfbMs, 99) }
  const clientErrors: Record<string, number> = {}
  for (const r of done.filter((x) => x.status === 0)) clientErrors[r.error ?? 'unknown'] = (clientErrors[r.error ?? 'unknown'] ?? 0) + 1
  // When in the run each failed, and how long after it was sent: an idle keep-alive connection the
  // server closed fails at once; an overloaded server fails late.
  const clientErrorTimes = done.filter((x) => x.status === 0).map((r) => ({ sentAtS: Number(((r.startMs - t0) / 1000).toFixed(1)), afterMs: Math.round(r.totalMs), error: r.error }))
  const figures = { edge_rss_mib_per_min_last_minute: edgeRssSlope(rssSamples, seconds) }
  const report = {
    // The run's figures under their keys, as bench/run.ts writes a section's (`overload.<figure>`).
    overload: figures,
    edgeRefusals,
    clientErrors,
    clientErrorTimes,
    edge: edgeKind, regions: stack.regions.length, capacityReqPerS: rate, factor, seconds,
    sent: done.length, dropped: run.dropped, byStatus,
    refusals: { count: refused.length, withRetryAfterMs: withRetryHint, withoutHint, p50Ms: percentile(refusedMs, 50), p99Ms: percentile(refusedMs, 99), atEdgeP50Ms: percentile(edgeRefusalMs, 50), atEdgeP99Ms: percentile(edgeRefusalMs, 99) },
    okP99Ms: percentile(done.filter((r) => r.status === 200).map((r) => r.totalMs), 99),
    afterwards: Object.fromEntries(idle),
    prefixCache,
    queued,
    clientSide,
    coresUsed: cores,
    edgeServed,
    rss: rssSamples,
  }
  mkdirSync('bench/results', { recursive: true })
  const file = `bench/results/overload-${new Date().toISOString().replace(/[:.]/g, '-')}.json`
  writeFileSync(file, JSON.stringify(report, null, 2))
  console.log(`\n| figure (key) | value | target |\n|---|---:|---:|\n| the edge's RSS (process tree), least-squares slope over the overload's last ${SLOPE_WINDOW_S} s, MiB/min<br>\`overload.edge_rss_mib_per_min_last_minute\` | ${figures.edge_rss_mib_per_min_last_minute ?? `n/a (the overload ran under ${SLOPE_WINDOW_S} s)`} | ≈ 0 |`)
  console.log(`\n| status | count |\n|---|---:|\n${Object.entries(byStatus).map(([s, n]) => `| ${s} | ${n} |`).join('\n')}`)
  console.log(`\nrefusals: ${refused.length}, ${withRetryHint} with retry-after-ms, p50 ${report.refusals.p50Ms?.toFixed(0)} ms, p99 ${report.refusals.p99Ms?.toFixed(0)} ms (inside the edge's code: p50 ${report.refusals.atEdgeP50Ms?.toFixed(0)} ms, p99 ${report.refusals.atEdgeP99Ms?.toFixed(0)} ms); 200 p99 ${report.okP99Ms?.toFixed(0)} ms; dropped by the client's in-flight bound: ${run.dropped}`)
  if (withoutHint.length > 0) console.log(`refusals without retry-after-ms, the first: ${JSON.stringify(withoutHint)}`)
  console.log(`edge log, 5xx by outcome: ${JSON.stringify(edgeRefusals)}; client errors: ${JSON.stringify(clientErrors)} ${JSON.stringify(clientErrorTimes.slice(0, 10))}`)
  for (const [what, q] of Object.entries(queued)) console.log(`at the nodes, ${what}: ${q.count} requests, ${q.overBound} over the ${queueMs} ms bound they were admitted by, ${q.over2xBound} over twice it (histogram buckets)`)
  console.log(`at the client: ${clientSide.served} served, over ${queueMs} ms (or no answer): ${clientSide.overBound}, over twice it: ${clientSide.over2xBound}; stream headers p99 ${clientSide.streamHeadersP99Ms?.toFixed(0)} ms; TTFB p50 ${clientSide.ttfbP50Ms?.toFixed(0)} ms, p99 ${clientSide.ttfbP99Ms?.toFixed(0)} ms — inside the edge's code: p50 ${edgeServed.ttfbP50Ms?.toFixed(0)} ms, p99 ${edgeServed.ttfbP99Ms?.toFixed(0)} ms (${edgeServed.count} logged)`)
  console.log(`CPU cores used over the run, by process: ${Object.entries(cores).map(([k, v]) => `${k} ${v}`).join(', ')}`)
  console.log(`prefix cache at the end (MiB held / budget): ${Object.entries(prefixCache).map(([n, c]) => `${n} ${c.bytesMiB}/${c.capacityMiB}`).join(', ')}`)
  console.log(`edge processes at the end (MiB): ${rssSamples.at(-1)?.edgeProcessesMiB}`)
  console.log(`afterwards: ${idle.map(([n, s]) => `${n} ${s}`).join(', ')}`)
  console.log(`\n| t (s) | client connections | edge RSS (MiB) | ${stack.regions.map((r) => `${r.name} RSS`).join(' | ')} | edge processes (MiB) |\n|---:|---:|---:|${stack.regions.map(() => '---:').join('|')}|---|`)
  for (const s of rssSamples) console.log(`| ${s.atS} | ${s.clientConnections} | ${s.edgeMiB} | ${stack.regions.map((r) => s.nodesMiB[r.name]).join(' | ')} | ${s.edgeProcessesMiB} |`)
  console.log(`\nwritten: ${file}`)
} finally {
  await dispatcher.close()
  await stack.stop()
}
