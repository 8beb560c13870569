/**
 * `npx tsx bench/probe/c64-survivors.ts [--requests N]`: what of the Node edge outlives a young
 * collection at c64 (docs/PERFORMANCE.md, "Where the pinned c64 p99 goes"), by allocation site.
 * The built edge alone on core 0, everything else on core 1, 64 clients of streaming requests as
 * in c64-gc-probe.ts; after a warm-up, N requests (default 8192) run under the survivor trace
 * (bench/probe/survivor-trace.ts). Prints the surviving bytes per request and the allocation
 * sites (innermost frame, mapped to the sources through the bundle's source map) that hold most.
 */
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { sourceLocator } from '../lib/cpu-profile-stages.ts'
import { BENCH_API_KEY, INSTANT_MODEL } from '../lib/bench-edge.ts'
import { startPinnedRig } from '../lib/pinned-rig.ts'
import { startNodeEdge } from '../lib/services.ts'
import { sendRequest } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'

interface HeapNode { callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number }; selfSize: number; children: HeapNode[] }

const { values } = parseArgs({ options: { requests: { type: 'string', default: '8192' } } })
const requests = Number(values.requests)
const out = join(mkdtempSync(join(tmpdir(), 'zl-survivors-')), 'edge.heapprofile')
const rig = await startPinnedRig()
const { agent } = rig
try {
  const edge = rig.own(await startNodeEdge({ ...rig.edgeEnv, SURVIVOR_TRACE_OUT: out }, { cpus: '0', preload: [join(import.meta.dirname, 'survivor-trace.ts')] }))
  const body = buildBody('openai-chat', { model: INSTANT_MODEL, text: 'hello', maxTokens: 1, stream: true })
  const send = (signal: AbortSignal) => sendRequest({ origin: edge.url, dialect: 'openai-chat', body, stream: true, headers: { authorization: `Bearer ${BENCH_API_KEY}` }, dispatcher: agent, timeoutMs: 20_000, signal })
  await closedLoop({ concurrency: 64, durationMs: 30_000, graceMs: 5000, maxRequests: 4096, run: (_i, s) => send(s) })
  const signal = async (msg: string) => {
    const seen = edge.proc.waitFor((_l, j) => j?.msg === msg, 60_000)
    process.kill(edge.proc.pid, 'SIGUSR2')
    await seen
  }
  await signal('survivor-trace started')
  const run = await closedLoop({ concurrency: 64, durationMs: 120_000, graceMs: 5000, maxRequests: requests, run: (_i, s) => send(s) })
  await signal('survivor-trace written')
  const head = (JSON.parse(readFileSync(out, 'utf8')) as { head: HeapNode }).head
  const where = siteNamer(edge.module)
  const bySite = new Map<string, number>()
  let total = 0
  const walk = (n: HeapNode) => {
    if (n.selfSize) {
      total += n.selfSize
      const site = where(n.callFrame)
      bySite.set(site, (bySite.get(site) ?? 0) + n.selfSize)
    }
    for (const c of n.children) walk(c)
  }
  walk(head)
  const served = run.results.length
  console.log(JSON.stringify({ requests: served, surviving_bytes_per_request: Math.round(total / served) }))
  for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(JSON.stringify({ site, bytes_per_request: Math.round(bytes / served), share: Math.round((1000 * bytes) / total) / 10 }))
  }
} finally {
  await rig.close()
}

/** `function file:line` of a frame; a frame of the built edge named by its source. */
function siteNamer(module: string | undefined): (f: HeapNode['callFrame']) => string {
  const locate = module ? sourceLocator(module) : undefined
  return (f) => {
    const at = locate?.(f.url, f.lineNumber, f.columnNumber) ?? { url: f.url, line: f.lineNumber }
    return `${f.functionName || '(anonymous)'} ${at.url.replace(/^.*?((edge|shared)\/src\/|node_modules\/)/, '$1')}:${at.line + 1}`
  }
}
