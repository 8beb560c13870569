/**
 * `npx tsx bench/probe/redis-per-request-probe.ts`: Redis commands per request (redis `INFO commandstats`)
 * and the Upstash bridge's and redis-server's CPU per request, at concurrency 64 (384 32-token
 * streams per round, two rounds), through the Node edge and the Workers entry on Miniflare directly
 * — where a Workers edge's limiter calls wait at c64 (edge/README.md). Needs redis-cli. EXTRA_ENV (JSON) adds edge variables.
 */
import { randomBytes } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { benchAgent, sendRequest } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'
import { BENCH_API_KEY, benchEdgeEnv, seedBenchKey } from '../lib/bench-edge.ts'
import { processCpuSeconds } from '../lib/procs.ts'
import { chatPromptOfLength } from '../lib/prompts.ts'
import { percentile } from '../lib/stats.ts'
import { startGpuNode, startNodeEdge, startUpstashProcs, startWranglerDev } from '../lib/services.ts'

const secret = randomBytes(24).toString('hex')
const stops: Array<() => Promise<void>> = []
const extra = JSON.parse(process.env.EXTRA_ENV ?? '{}')
try {
  const upstash = await startUpstashProcs(); stops.push(() => upstash.stop())
  await seedBenchKey(upstash)
  const node = await startGpuNode({ modelDir: 'models/tiny', secret, env: { INTRA_OP_THREADS: '1' } }); stops.push(() => node.stop())
  const edgeEnv: Record<string, string> = { ...benchEdgeEnv(upstash, secret, [{ id: 'bench-node', url: node.url, model: node.model }]), ...extra }
  const edges: Record<string, string> = {}
  const ne = await startNodeEdge(edgeEnv); stops.push(() => ne.stop()); edges['node-edge'] = ne.url
  const mf = await startWranglerDev(edgeEnv, { kind: 'miniflare' }); stops.push(() => mf.stop()); edges.miniflare = mf.url
  const port = upstash.redis.port
  const stats = () => Object.fromEntries(execFileSync('redis-cli', ['-p', String(port), 'info', 'commandstats'], { encoding: 'utf8' }).split('\n').filter((l) => l.startsWith('cmdstat_')).map((l) => [l.split(':')[0]!.slice(8), Number(/calls=(\d+)/.exec(l)![1])]))
  const prompt = chatPromptOfLength('models/tiny', 32)
  const body = buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: 32, stream: true, ignoreEos: true })
  const dispatcher = benchAgent()
  const send = (t: string, s?: AbortSignal) => sendRequest({ origin: edges[t]!, dialect: 'openai-chat', body, stream: true, headers: { authorization: `Bearer ${BENCH_API_KEY}` }, dispatcher, timeoutMs: 120_000, ...(s ? { signal: s } : {}) })
  for (const t of Object.keys(edges)) await closedLoop({ concurrency: 8, durationMs: 30_000, graceMs: 10_000, maxRequests: 64, run: (_n, s) => send(t, s) })
  for (let r = 0; r < 2; r++) for (const t of Object.keys(edges)) {
    const before = stats()
    const bc0 = upstash.bridge.cpuSeconds(); const rc0 = processCpuSeconds(upstash.redis.pid)
    const run = await closedLoop({ concurrency: 64, durationMs: 60_000, graceMs: 10_000, maxRequests: 384, run: (_n, s) => send(t, s) })
    await new Promise((res) => setTimeout(res, 1500))
    const after = stats()
    const bridgeCpuMsPerReq = +(((upstash.bridge.cpuSeconds() - bc0) * 1000) / 384).toFixed(3); const redisCpuMsPerReq = +(((processCpuSeconds(upstash.redis.pid) - rc0) * 1000) / 384).toFixed(3)
    const delta = Object.fromEntries(Object.keys(after).map((k) => [k, +(((after[k]! - (before[k] ?? 0)) / 384).toFixed(2))]).filter(([, v]) => (v as number) > 0))
    const ok = run.results.filter((x) => x.status === 200 && !x.error)
    const statuses: Record<string, number> = {}
    for (const x of run.results) statuses[x.status ?? 'err'] = (statuses[x.status ?? 'err'] ?? 0) + 1
    console.log(JSON.stringify({ round: r, t, p99: Math.round(percentile(ok.map((x) => x.ttfbMs!), 99)), p50: Math.round(percentile(ok.map((x) => x.ttfbMs!), 50)), statuses, bridgeCpuMsPerReq, redisCpuMsPerReq, redisCallsPerRequest: delta }))
  }
} finally { for (const s of stops.reverse()) await s().catch(() => {}) }
