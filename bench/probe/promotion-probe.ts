/**
 * `npx tsx bench/probe/promotion-probe.ts [--concurrency 1] [--requests 3000]`: how much of each
 * request outlives two young-generation collections (V8 promotes it to the old generation, where
 * only a full collection frees it), by kind of request — the c64 section of docs/PERFORMANCE.md.
 * The built Node edge and the bare Hono passthrough each alone on core 0 under `--trace-gc-nvp`,
 * the load generator, the instant upstream, the bridge and redis on core 1; a closed loop of
 * `--concurrency` clients sends `--requests` requests of one kind at a time after a warm-up, in
 * this order: `refused` (a wrong key: 401 at the edge), `whole` (a chat, not streaming), `stream`
 * (the same chat, streaming) and, through the passthrough, `bare-stream`. `stream` comes last of
 * the edge's kinds: kinds run after it in the same process were seen to carry some of its excess.
 * Per kind: young collections, their mean pause, and bytes promoted and surviving per request
 * (V8's own counters, summed over the collections of the run, divided by its requests).
 */
import { parseArgs } from 'node:util'
import { BENCH_API_KEY, INSTANT_MODEL } from '../lib/bench-edge.ts'
import { startPinnedRig } from '../lib/pinned-rig.ts'
import { startBarePassthrough, startNodeEdge, type EdgeProc } from '../lib/services.ts'
import { round } from '../lib/stats.ts'
import { sendRequest } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'

const { values } = parseArgs({ options: { concurrency: { type: 'string', default: '1' }, requests: { type: 'string', default: '3000' } } })
const concurrency = Number(values.concurrency)
const requests = Number(values.requests)
const WRONG_KEY = 'zl-' + 'f'.repeat(32)

/** `--trace-gc-nvp` lines (`… pause=1.2 … gc=s … promoted=123 …`) as records, collected from a proxy's output. */
function nvpCollector(proxy: EdgeProc): { take(): Array<Record<string, string>> } {
  let lines: string[] = []
  let rest = ''
  proxy.proc.child.stdout!.on('data', (text: string) => {
    rest += text
    let nl: number
    while ((nl = rest.indexOf('\n')) >= 0) {
      const line = rest.slice(0, nl)
      rest = rest.slice(nl + 1)
      if (line.includes(' pause=')) lines.push(line)
    }
  })
  const parse = (line: string) => Object.fromEntries(line.split(/\s+/).filter((kv) => kv.includes('=')).map((kv) => kv.split('=') as [string, string]))
  return {
    take() {
      const taken = lines.map(parse)
      lines = []
      return taken
    },
  }
}

const rig = await startPinnedRig()
const { agent } = rig
try {
  const nodeArgs = ['--trace-gc-nvp']
  const edge = rig.own(await startNodeEdge(rig.edgeEnv, { cpus: '0', nodeArgs }))
  const bare = rig.own(await startBarePassthrough(rig.instant.url, { cpus: '0', nodeArgs }))
  const kinds = [
    { kind: 'refused', proxy: edge, stream: true, key: WRONG_KEY },
    { kind: 'whole', proxy: edge, stream: false, key: BENCH_API_KEY },
    { kind: 'stream', proxy: edge, stream: true, key: BENCH_API_KEY },
    { kind: 'bare-stream', proxy: bare, stream: true, key: undefined },
  ]
  const collectors = new Map([edge, bare].map((p) => [p, nvpCollector(p)]))
  for (const k of kinds) {
    const body = buildBody('openai-chat', { model: INSTANT_MODEL, text: 'hello', maxTokens: 1, stream: k.stream })
    const send = (signal?: AbortSignal) =>
      sendRequest({ origin: k.proxy.url, dialect: 'openai-chat', body, stream: k.stream, headers: k.key ? { authorization: `Bearer ${k.key}` } : {}, dispatcher: agent, timeoutMs: 20_000, ...(signal ? { signal } : {}) })
    await closedLoop({ concurrency, durationMs: 30_000, graceMs: 5000, maxRequests: 1000, run: (_i, s) => send(s) })
    collectors.get(k.proxy)!.take()
    const run = await closedLoop({ concurrency, durationMs: 120_000, graceMs: 5000, maxRequests: requests, run: (_i, s) => send(s) })
    const young = collectors.get(k.proxy)!.take().filter((g) => g.gc === 's')
    const sum = (field: string) => young.reduce((a, g) => a + Number(g[field] ?? 0), 0)
    const done = run.results.length
    console.log(JSON.stringify({
      kind: k.kind, concurrency, requests: done, statuses: [...new Set(run.results.map((r) => r.status))],
      young_collections: young.length, mean_pause_ms: round(sum('pause') / Math.max(1, young.length)),
      promoted_bytes_per_request: Math.round(sum('promoted') / done), survived_bytes_per_request: Math.round(sum('new_space_survived') / done),
    }))
  }
} finally {
  await rig.close()
}
