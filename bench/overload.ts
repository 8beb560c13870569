/**
 * Issue 17 item 11, a measurement (not a test): a bounded overload of the local stack through the
 * edge. `npx tsx bench/overload.ts [--seconds 60] [--factor 3] [--edge wrangler|miniflare|wrangler-inspector|node] [--regions 3] [--queue-wait-ms 10000] [--node-nice 10]`
 *
 * 1. capacity: a closed loop of 8 clients for 10 s measures the stack's request rate R;
 * 2. overload: Poisson arrivals at factor × R for `seconds` (non-streaming and streaming chat,
 *    32 tokens each), in-flight bounded so the client's own memory stays bounded;
 * 3. afterwards: every node must drop to zero running and waiting sequences.
 * It reports statuses (only 200 and fast 503/529 carrying retry-after-ms are expected), how fast
 * the refusals came, and the RSS of the edge (its whole process tree: wrangler + workerd) and of
 * each node every 5 s. Writes bench/results/overload-<time>.json and prints a markdown summary.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { EDGE_KINDS } from '../infra/local/stack-config.ts'
import { pollUntil, startTestStack } from '../test/e2e/support/stack.ts'
import { benchAgent, sendRequest, type RequestRecord } from './load/client.ts'
import { buildBody } from './load/dialects.ts'
import { closedLoop, openLoop } from './load/generators.ts'
import { percentile, poissonArrivals } from './lib/stats.ts'

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '60' }, factor: { type: 'string', default: '3' }, edge: { type: 'string', default: 'wrangler' }, regions: { type: 'string', default: '3' }, 'queue-wait-ms': { type: 'string', default: '10000' }, 'node-nice': { type: 'string', default: '10' } } })
const seconds = Number(values.seconds)
const factor = Number(values.factor)
const edgeKind = EDGE_KINDS.find((k) => k === values.edge) ?? 'wrangler'

/** Resident memory of a process and each of its descendants, MiB (from /proc). */
function treeRss(pid: number | undefined): Array<{ pid: number; name: string; mib: number }> {
  if (pid === undefined) return []
  const children = (p: number): number[] => {
    try {
      return readdirSync(`/proc/${p}/task`).flatMap((t) => readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number))
    } catch {
      return []
    }
  }
  const out: Array<{ pid: number; name: string; mib: number }> = []
  const stack = [pid]
  while (stack.length > 0) {
    const p = stack.pop()!
    try {
      const status = readFileSync(`/proc/${p}/status`, 'utf8')
      out.push({ pid: p, name: /Name:\s+(\S+)/.exec(status)?.[1] ?? '?', mib: Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024) })
    } catch {
      continue
    }
    stack.push(...children(p))
  }
  return out
}

/** A process tree's RSS, MiB; null when the process is gone. */
function totalMiB(tree: ReadonlyArray<{ mib: number }>): number | null {
  return tree.length === 0 ? null : tree.reduce((n, p) => n + p.mib, 0)
}

// The nodes bound the wait they queue (MAX_QUEUE_WAIT_MS, off by default): overload is answered, not queued.
const stack = await startTestStack({ regions: Number(values.regions), edge: edgeKind, nodeVars: { MAX_QUEUE_WAIT_MS: values['queue-wait-ms']! }, nodeNice: Number(values['node-nice']) })
const dispatcher = benchAgent({ connections: 256 })
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

  const rssSamples: Array<{ atS: number; edgeMiB: number | null; edgeProcessesMiB: string; nodesMiB: Record<string, number | null> }> = []
  const sample = () => {
    const edge = treeRss(stack.running.supervisor.pid('edge'))
    rssSamples.push({
      atS: Math.round((performance.now() - t0) / 1000),
      edgeMiB: totalMiB(edge),
      // Which of the edge's processes grows (wrangler's node, its workerd instances, esbuild).
      edgeProcessesMiB: edge.map((p) => `${p.name} ${p.mib}`).join(', '),
      nodesMiB: Object.fromEntries(stack.regions.map((r) => [r.name, totalMiB(treeRss(stack.nodePid(r.name)))])),
    })
  }
  const t0 = performance.now()
  sample()
  const timer = setInterval(sample, 5000)
  console.log(`overload: ${(rate * factor).toFixed(1)} req/s (${factor}×) for ${seconds} s…`)
  const arrivals = poissonArrivals(rate * factor, Math.ceil(rate * factor * seconds * 1.2) + 10, 17)
  const run = await openLoop({ arrivalsMs: arrivals, deadlineMs: seconds * 1000, drainMs: 30_000, maxInFlight: 2000, run: (_i, signal) => one(signal) })
  clearInterval(timer)
  sample()

  const done = run.results.filter((r): r is RequestRecord => r !== undefined)
  const byStatus: Record<string, number> = {}
  for (const r of done) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1
  const refused = done.filter((r) => r.status === 503 || r.status === 529)
  const refusedMs = refused.map((r) => r.totalMs)
  const withRetryHint = refused.filter((r) => r.retryAfterMs !== undefined).length
  // What the nodes' memory holds at the end: the prefix cache fills up to its own budget
  // (PREFIX_CACHE_MB), beside the KV budget, so a node's RSS climbs to that bound and stops.
  const prefixCache = Object.fromEntries(await Promise.all(stack.regions.map(async (r) => {
    const m = await stack.metrics(r.name)
    return [r.name, { bytesMiB: Math.round((m.value('zl_prefix_cache_bytes') ?? 0) / 2 ** 20), capacityMiB: Math.round((m.value('zl_prefix_cache_capacity_bytes') ?? 0) / 2 ** 20) }] as const
  })))
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
  for (const line of edgeLog) {
    const m = /"status":(5\d\d),"outcome":"([a-z_]+)"/.exec(line)
    if (m) edgeRefusals[`${m[1]} ${m[2]}`] = (edgeRefusals[`${m[1]} ${m[2]}`] ?? 0) + 1
    const total = m && /"durationMs":(\d+)/.exec(line)
    if (total && (m[1] === '503' || m[1] === '529')) edgeRefusalMs.push(Number(total[1]))
  }
  const clientErrors: Record<string, number> = {}
  for (const r of done.filter((x) => x.status === 0)) clientErrors[r.error ?? 'unknown'] = (clientErrors[r.error ?? 'unknown'] ?? 0) + 1
  const report = {
    edgeRefusals,
    clientErrors,
    edge: edgeKind, regions: stack.regions.length, capacityReqPerS: rate, factor, seconds,
    sent: done.length, dropped: run.dropped, byStatus,
    refusals: { count: refused.length, withRetryAfterMs: withRetryHint, p50Ms: percentile(refusedMs, 50), p99Ms: percentile(refusedMs, 99), atEdgeP50Ms: percentile(edgeRefusalMs, 50), atEdgeP99Ms: percentile(edgeRefusalMs, 99) },
    okP99Ms: percentile(done.filter((r) => r.status === 200).map((r) => r.totalMs), 99),
    afterwards: Object.fromEntries(idle),
    prefixCache,
    rss: rssSamples,
  }
  mkdirSync('bench/results', { recursive: true })
  const file = `bench/results/overload-${new Date().toISOString().replace(/[:.]/g, '-')}.json`
  writeFileSync(file, JSON.stringify(report, null, 2))
  console.log(`\n| status | count |\n|---|---:|\n${Object.entries(byStatus).map(([s, n]) => `| ${s} | ${n} |`).join('\n')}`)
  console.log(`\nrefusals: ${refused.length}, ${withRetryHint} with retry-after-ms, p50 ${report.refusals.p50Ms?.toFixed(0)} ms, p99 ${report.refusals.p99Ms?.toFixed(0)} ms (inside the edge's code: p50 ${report.refusals.atEdgeP50Ms?.toFixed(0)} ms, p99 ${report.refusals.atEdgeP99Ms?.toFixed(0)} ms); 200 p99 ${report.okP99Ms?.toFixed(0)} ms; dropped by the client's in-flight bound: ${run.dropped}`)
  console.log(`edge log, 5xx by outcome: ${JSON.stringify(edgeRefusals)}; client errors: ${JSON.stringify(clientErrors)}`)
  console.log(`prefix cache at the end (MiB held / budget): ${Object.entries(prefixCache).map(([n, c]) => `${n} ${c.bytesMiB}/${c.capacityMiB}`).join(', ')}`)
  console.log(`edge processes at the end (MiB): ${rssSamples.at(-1)?.edgeProcessesMiB}`)
  console.log(`afterwards: ${idle.map(([n, s]) => `${n} ${s}`).join(', ')}`)
  console.log(`\n| t (s) | edge RSS (MiB) | ${stack.regions.map((r) => `${r.name} RSS`).join(' | ')} | edge processes (MiB) |\n|---:|---:|${stack.regions.map(() => '---:').join('|')}|---|`)
  for (const s of rssSamples) console.log(`| ${s.atS} | ${s.edgeMiB} | ${stack.regions.map((r) => s.nodesMiB[r.name]).join(' | ')} | ${s.edgeProcessesMiB} |`)
  console.log(`\nwritten: ${file}`)
} finally {
  await dispatcher.close()
  await stack.stop()
}
