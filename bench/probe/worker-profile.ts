/**
 * `npx tsx bench/probe/worker-profile.ts [--worker edge|bare] [--requests N] [--json FILE]`: where
 * our Worker's CPU goes in workerd (issue 18: the local Workers edge at c64). The Worker runs on
 * Miniflare as `npm start` runs it, with workerd's V8 inspector on; the instant upstream, the
 * bridge, redis and this load generator are on core 1 (bench/lib/pinned-rig.ts). After a warm-up,
 * V8's sampling profiler (DevTools protocol) records N streaming chats at concurrency 64 (default
 * 4096). Prints requests per second, then the busy samples by stage of the request path
 * (cpu-profile-stages.ts; native calls such as a stream's read are charged to our innermost frame
 * that made them) and the top functions by self time, the frames mapped to their sources through
 * the source map of the same wrangler build. `--worker bare`: bench/probe/bare-worker (a Worker
 * that only proxies, fed signed requests), the runtime's own cost for comparison. The inspector
 * costs every request: compare figures of this probe with each other, not with the bench.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { signRequest } from '../../shared/src/signature.ts'
import { BENCH_API_KEY, INSTANT_MODEL } from '../lib/bench-edge.ts'
import { leafFunctionsOf, stagesOf, withSources, type CpuProfile } from '../lib/cpu-profile-stages.ts'
import { devtools } from '../lib/devtools.ts'
import { startPinnedRig } from '../lib/pinned-rig.ts'
import { freePort } from '../../infra/local/redis-process.ts'
import { startWranglerDev } from '../lib/services.ts'
import { round } from '../lib/stats.ts'
import { sendRequest } from '../load/client.ts'
import { buildBody, DIALECT_PATH } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'

const { values } = parseArgs({ options: { worker: { type: 'string', default: 'edge' }, requests: { type: 'string', default: '4096' }, json: { type: 'string' } } })
const bare = values.worker === 'bare'
const config = bare ? 'bench/probe/bare-worker/wrangler.toml' : 'wrangler.toml'

// The same build Miniflare serves (wrangler's, deterministic), for its source map.
const built = mkdtempSync(join(tmpdir(), 'zl-worker-profile-'))
const rig = await startPinnedRig()
try {
  execFileSync(process.execPath, ['node_modules/wrangler/bin/wrangler.js', 'deploy', '--dry-run', '--config', config, '--outdir', built], { env: { ...process.env, WRANGLER_SEND_METRICS: 'false' }, stdio: 'ignore' })
  const inspectorPort = await freePort()
  const env = bare ? { UPSTREAM: rig.instant.url } : rig.edgeEnv
  const worker = rig.own(await startWranglerDev(env, { kind: 'miniflare', config, name: `${values.worker}-worker`, inspectorPort }))
  const body = buildBody('openai-chat', { model: INSTANT_MODEL, text: 'hello', maxTokens: 1, stream: true })
  let n = 0
  const send = async (signal?: AbortSignal) => {
    let headers: Record<string, string>
    if (bare) {
      const requestId = `worker-profile-${n++}`
      headers = { 'x-request-id': requestId, 'x-zl-signature': await signRequest({ secret: rig.edgeEnv.EDGE_SHARED_SECRET!, method: 'POST', path: DIALECT_PATH['openai-chat'], requestId, body, nowMs: Date.now() }) }
    } else headers = { authorization: `Bearer ${BENCH_API_KEY}` }
    return sendRequest({ origin: worker.url, dialect: 'openai-chat', body, stream: true, headers, dispatcher: rig.agent, timeoutMs: 20_000, ...(signal ? { signal } : {}) })
  }
  await closedLoop({ concurrency: 64, durationMs: 60_000, graceMs: 5000, maxRequests: 2048, run: (_i, s) => send(s) })
  const session = await devtools(inspectorPort)
  await session.call('Profiler.enable')
  await session.call('Profiler.setSamplingInterval', { interval: 200 })
  await session.call('Profiler.start')
  const run = await closedLoop({ concurrency: 64, durationMs: 120_000, graceMs: 5000, maxRequests: Number(values.requests), run: (_i, s) => send(s) })
  const { profile } = await session.call<{ profile: CpuProfile }>('Profiler.stop')
  session.close()
  const failed = run.results.filter((r) => r.status !== 200 || r.error).length
  const mapped = withSources(profile, join(built, 'worker.js'), 'worker.js')
  if (values.json) writeFileSync(values.json, JSON.stringify(mapped))
  const byId = new Map(mapped.nodes.map((x) => [x.id, x]))
  const idle = mapped.samples.filter((id) => byId.get(id)!.callFrame.functionName === '(idle)').length
  console.log(JSON.stringify({ worker: values.worker, requests: run.results.length, failed, requests_per_s: round((run.results.length / run.endedAtMs) * 1000), busy_share: round(1 - idle / mapped.samples.length), busy_samples_per_request: round((mapped.samples.length - idle) / run.results.length) }))
  for (const s of stagesOf(mapped)) console.log(`${(100 * s.share).toFixed(1).padStart(5)} %  ${s.stage}  ${s.files.slice(0, 4).join(', ')}`)
  console.log('top functions (self):')
  for (const f of leafFunctionsOf(mapped, 25)) console.log(`${(100 * f.share).toFixed(1).padStart(5)} %  ${f.fn}`)
} finally {
  await rig.close()
  rmSync(built, { recursive: true, force: true })
}
