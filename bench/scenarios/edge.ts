/**
 * Edge scenarios: what the edge adds to time to first byte and total time, direct to a
 * GPU node vs through the Node edge vs through `wrangler dev`, with auth and rate limiting on
 * (a seeded key with huge limits, real redis-server + the Upstash bridge as its own process, the
 * limiter's failure mode `closed` so a limiter that could not decide shows up as an error rather
 * than as a silently skipped check); and the Node edge's requests/s on one core against a
 * bench-only upstream that answers at once.
 *
 * - The node runs the tiny model with one ONNX Runtime thread: the edge's cost does not depend on
 *   the model, and a small model would keep both cores busy and measure CPU contention instead.
 *   Direct requests carry a valid edge signature (computed before the clock starts), so the node
 *   does the same work either way.
 * - Concurrency 1: each iteration sends one request to each target, order rotated; per round,
 *   added TTFB p50 = p50(edge) − p50(direct); the figure is the median over rounds.
 * - Concurrency 64: per round, each target (order rotated) gets a closed loop of 64 clients for a
 *   fixed number of requests; added TTFB p99 = p99(edge) − p99(direct); median over rounds.
 * - TTFB = first response body byte (the node sends the dialect's opening frames as soon as it
 *   admits a stream); total = last byte. Both dialects, alternating.
 * - Requests/s on one core: the Node edge is pinned to core 0 for that phase (`taskset -c 0`; the
 *   latency phases leave it unpinned, as are the node, bare passthrough and client), the instant
 *   upstream, bridge and redis to core 1; a closed loop of non-streaming requests; the figure is
 *   completed requests per CPU-second the edge process used (its own /proc utime + stime), which
 *   is its one-core capacity; the achieved rate and the edge's CPU utilisation are reported with it.
 */
import { randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { BENCH_API_KEY, benchEdgeEnv, INSTANT_MODEL, seedBenchKey } from '../lib/bench-edge.ts'
import { signRequest } from '../../shared/src/signature.ts'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { benchAgent, sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody, DIALECT_PATH, type BenchDialect } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'
import { hasTaskset, pinPid, pinSelf } from '../lib/procs.ts'
import { chatPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { ensureSystemPackages, NGINX_LIGHT, REDIS_SERVER, VALGRIND } from '../lib/system-packages.ts'
import { runFairEdge } from './edge-fair.ts'
import { startBarePassthrough, startGpuNode, startInstantUpstream, startNodeEdge, startUpstashProcs, startWranglerDev, type EdgeProc, type GpuNode, type LocalUpstashProcs } from '../lib/services.ts'
import { median, percentile, round, summarize } from '../lib/stats.ts'
import { runEdgeStreams } from './edge-streams.ts'

const MAX_TOKENS = 32

type Target = 'direct' | 'node-edge' | 'wrangler' | 'bare-hono'

interface RpsRound {
  requests: number
  ok: number
  errors: number
  wall_s: number
  cpu_s: number
  achieved_rps: number
  cpu_utilisation: number
  requests_per_cpu_s: number
  latency_ms: ReturnType<typeof summarize>
}

export async function runEdge(ctx: BenchContext, opts: { modelDir?: string } = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/tiny'
  await ensureGeneratedModel(modelDir, (l) => ctx.log(l))
  const notes: string[] = []
  const raw: Record<string, unknown> = { model: modelDir, max_tokens: MAX_TOKENS, taskset: hasTaskset() }
  const secret = randomBytes(24).toString('hex')
  const pinned = hasTaskset()
  const others = pinned ? '1' : undefined
  const started: Array<{ stop(): Promise<void> }> = []
  const agent = benchAgent()
  // redis-server for the limiter; nginx-light and valgrind for the fair method (edge-fair.ts skips what is missing, with a note).
  const missing = ensureSystemPackages([REDIS_SERVER, NGINX_LIGHT, VALGRIND], (l) => ctx.log(l))
  if (missing.length) notes.push(`missing system packages: ${missing.join(', ')} (apt-get install -y ${missing.join(' ')})`)
  try {
    ctx.log('starting redis-server + Upstash bridge, a GPU node, the instant upstream, the Node edge and two bare Hono passthroughs (core 0), and wrangler dev')
    const upstash: LocalUpstashProcs = await startUpstashProcs(others ? { cpus: others } : {})
    started.push(upstash)
    await seedBenchKey(upstash)
    const node: GpuNode = await startGpuNode({ modelDir, secret, env: { INTRA_OP_THREADS: '1' } })
    started.push(node)
    const instant = await startInstantUpstream(others ? { cpus: others } : {})
    started.push(instant)
    const edgeEnv = benchEdgeEnv(upstash, secret, [
      { id: 'bench-node', url: node.url, model: node.model },
      { id: 'bench-instant', url: instant.url, model: INSTANT_MODEL },
    ])
    // Unpinned while latency is measured (as a deployed edge shares its cores with nothing of
    // ours); pinned to core 0 only for the one-core capacity phase.
    const nodeEdge: EdgeProc = await startNodeEdge(edgeEnv)
    started.push(nodeEdge)
    // The framework's floor, for perspective: a bare Hono passthrough (no auth, limits, validation).
    const bareNode = await startBarePassthrough(node.url)
    started.push(bareNode)
    const bareInstant = await startBarePassthrough(instant.url, pinned ? { cpus: '0' } : {})
    started.push(bareInstant)
    let wrangler: EdgeProc | undefined
    try {
      wrangler = await startWranglerDev(edgeEnv)
      started.push(wrangler)
    } catch (e) {
      notes.push(`wrangler dev did not start: ${(e as Error).message.split('\n')[0]}`)
      ctx.log(`wrangler dev did not start; continuing without it: ${(e as Error).message.split('\n')[0]}`)
    }

    const prompt = chatPromptOfLength(modelDir, 32)
    const bodies: Partial<Record<BenchDialect, Uint8Array>> = {
      'openai-chat': buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: MAX_TOKENS, stream: true, ignoreEos: true }),
      'anthropic-messages': buildBody('anthropic-messages', { model: node.model, text: prompt.text, maxTokens: MAX_TOKENS, stream: true, ignoreEos: true }),
      'openai-completions': buildBody('openai-completions', { model: node.model, text: prompt.text, maxTokens: MAX_TOKENS, stream: true, ignoreEos: true }),
    }
    const origins: Record<Target, string | undefined> = { direct: node.url, 'node-edge': nodeEdge.url, wrangler: wrangler?.url, 'bare-hono': bareNode.url }
    const targets = (Object.keys(origins) as Target[]).filter((t) => origins[t] !== undefined)
    // Every target at concurrency 64 too: the bare passthrough's added p99 is the framework's floor there.
    const c64Targets = targets
    let reqNo = 0
    const send = async (target: Target, dialect: BenchDialect, signal?: AbortSignal): Promise<RequestRecord> => {
      const body = bodies[dialect]!
      let headers: Record<string, string>
      if (target === 'direct' || target === 'bare-hono') {
        const requestId = `bench-${process.pid}-${reqNo++}`
        headers = { 'x-request-id': requestId, 'x-zl-signature': await signRequest({ secret, method: 'POST', path: DIALECT_PATH[dialect], requestId, body, nowMs: Date.now() }) }
      } else {
        headers = dialect === 'anthropic-messages' ? { 'x-api-key': BENCH_API_KEY, 'anthropic-version': '2023-06-01' } : { authorization: `Bearer ${BENCH_API_KEY}` }
      }
      return sendRequest({ origin: origins[target]!, dialect, body, stream: true, headers, dispatcher: agent, timeoutMs: 60_000, ...(signal ? { signal } : {}) })
    }

    // Warm-up: connections, key cache, limiter scripts (EVALSHA cache), then the JIT. A few dozen
    // requests leave most of a process's request path unoptimised (measured here: ~1 ms more
    // per request through the edge at concurrency 1), which no serving process stays in; so every
    // target gets the same concurrent warm-up before anything is measured.
    for (let i = 0; i < (ctx.quick ? 10 : 30); i++) for (const t of targets) await send(t, i % 2 ? 'anthropic-messages' : 'openai-chat')
    const warmRequests = ctx.quick ? 100 : 1000
    for (const t of targets) {
      const t0 = performance.now()
      await closedLoop({ concurrency: 8, durationMs: 60_000, graceMs: 10_000, maxRequests: warmRequests, run: (i, signal) => send(t, i % 2 ? 'anthropic-messages' : 'openai-chat', signal) })
      ctx.log(`warm-up: ${warmRequests} requests at concurrency 8 to ${t} (${((performance.now() - t0) / 1000).toFixed(1)} s)`)
    }

    // Concurrency 1.
    const c1Rounds = ctx.quick ? 3 : 5
    const c1Iters = ctx.quick ? 16 : 60
    const c1: Record<Target, RequestRecord[]> = { direct: [], 'node-edge': [], wrangler: [], 'bare-hono': [] }
    const c1Added: Record<'node-edge' | 'wrangler' | 'bare-hono', number[]> = { 'node-edge': [], wrangler: [], 'bare-hono': [] }
    const c1AddedTotal: Record<'node-edge' | 'wrangler' | 'bare-hono', number[]> = { 'node-edge': [], wrangler: [], 'bare-hono': [] }
    for (let r = 0; r < c1Rounds; r++) {
      const round: Record<Target, RequestRecord[]> = { direct: [], 'node-edge': [], wrangler: [], 'bare-hono': [] }
      for (let i = 0; i < c1Iters; i++) {
        for (const t of rotate(targets, i)) {
          const rec = await send(t, i % 2 ? 'anthropic-messages' : 'openai-chat')
          round[t].push(rec)
          c1[t].push(rec)
        }
      }
      const p50 = (t: Target, f: (x: RequestRecord) => number | undefined) => percentile(okValues(round[t], f), 50)
      for (const t of ['node-edge', 'wrangler', 'bare-hono'] as const) {
        if (!origins[t]) continue
        c1Added[t].push(p50(t, (x) => x.ttfbMs) - p50('direct', (x) => x.ttfbMs))
        c1AddedTotal[t].push(p50(t, (x) => x.totalMs) - p50('direct', (x) => x.totalMs))
      }
      ctx.log(`c1 round ${r + 1}/${c1Rounds}: TTFB p50 direct ${p50('direct', (x) => x.ttfbMs).toFixed(2)} ms, node edge +${c1Added['node-edge'].at(-1)!.toFixed(2)} ms${origins.wrangler ? `, wrangler +${c1Added.wrangler.at(-1)!.toFixed(2)} ms` : ''}, bare Hono passthrough +${c1Added['bare-hono'].at(-1)!.toFixed(2)} ms`)
    }

    // Concurrency 64.
    const c64Rounds = ctx.quick ? 2 : 4
    const c64Requests = ctx.quick ? 96 : 768
    const c64: Record<Target, RequestRecord[]> = { direct: [], 'node-edge': [], wrangler: [], 'bare-hono': [] }
    const c64Added: Record<'node-edge' | 'wrangler' | 'bare-hono', number[]> = { 'node-edge': [], wrangler: [], 'bare-hono': [] }
    for (let r = 0; r < c64Rounds; r++) {
      const p99s: Partial<Record<Target, number>> = {}
      for (const t of rotate(c64Targets, r)) {
        const run = await closedLoop<RequestRecord>({
          concurrency: 64,
          durationMs: 60_000,
          graceMs: 5000,
          maxRequests: c64Requests,
          run: (i, signal) => send(t, i % 2 ? 'anthropic-messages' : 'openai-chat', signal),
        })
        c64[t].push(...run.results)
        p99s[t] = percentile(okValues(run.results, (x) => x.ttfbMs), 99)
        await sleep(200)
      }
      for (const t of ['node-edge', 'wrangler', 'bare-hono'] as const) if (p99s[t] !== undefined) c64Added[t].push(p99s[t]! - p99s.direct!)
      ctx.log(`c64 round ${r + 1}/${c64Rounds}: TTFB p99 direct ${p99s.direct!.toFixed(2)} ms, node edge ${p99s['node-edge']!.toFixed(2)} ms${p99s.wrangler !== undefined ? `, wrangler ${p99s.wrangler.toFixed(2)} ms` : ''}, bare Hono passthrough ${p99s['bare-hono']!.toFixed(2)} ms`)
    }

    // Streams at concurrency 8 and the Workers edge ÷ the Node edge at c64 (edge-streams.ts).
    const streams = await runEdgeStreams({ ctx, modelDir, node, secret, apiKey: BENCH_API_KEY, edgeEnv, nodeEdgeUrl: nodeEdge.url, ...(wrangler ? { wranglerUrl: wrangler.url } : {}), dispatcher: agent })
    raw.streams = streams.raw
    notes.push(...streams.notes)

    // Requests/s on one core, instant upstream, non-streaming; the bare Hono passthrough (same
    // core, same load) right after the edge in each round, for perspective.
    const rpsRounds = ctx.quick ? 2 : 3
    const rpsMs = ctx.quick ? 2000 : 10_000
    const instantBody = buildBody('openai-chat', { model: INSTANT_MODEL, text: 'hello', maxTokens: 1, stream: false })
    const rpsAgent = benchAgent()
    const rpsRoundsOut: RpsRound[] = []
    const bareRoundsOut: RpsRound[] = []
    // The load generator joins the upstream, bridge and redis on core 1: core 0 is the edge's.
    const unpinSelf = pinned ? pinSelf('1') : () => {}
    const unpinEdge = pinned ? pinPid(nodeEdge.proc.pid, '0') : () => {}
    const unpin = () => {
      unpinEdge()
      unpinSelf()
    }
    try {
      const sendTo = (origin: string, auth: boolean) => (signal: AbortSignal) =>
        sendRequest({ origin, dialect: 'openai-chat', body: instantBody, stream: false, headers: auth ? { authorization: `Bearer ${BENCH_API_KEY}` } : {}, dispatcher: rpsAgent, signal, timeoutMs: 10_000 })
      const measure = async (proc: EdgeProc, send: (s: AbortSignal) => Promise<RequestRecord>): Promise<RpsRound> => {
        const cpu0 = proc.proc.cpuSeconds()
        const t0 = performance.now()
        const run = await closedLoop<RequestRecord>({ concurrency: 32, durationMs: rpsMs, graceMs: 3000, run: (_i, s) => send(s) })
        const wallS = (performance.now() - t0) / 1000
        const cpuS = proc.proc.cpuSeconds() - cpu0
        const ok = run.results.filter((x) => x.status === 200 && !x.error).length
        return { requests: run.results.length, ok, errors: run.results.length - ok, wall_s: round(wallS), cpu_s: round(cpuS), achieved_rps: round(ok / wallS), cpu_utilisation: round(cpuS / wallS), requests_per_cpu_s: round(ok / cpuS), latency_ms: summarize(run.results.map((x) => x.totalMs)) }
      }
      const edgeSend = sendTo(nodeEdge.url, true)
      const bareSend = sendTo(bareInstant.url, false)
      // Warm the measured path (non-streaming, instant upstream) at the rounds' own load until V8
      // has compiled it. After 1 s of it, V8's background threads were still compiling (about 300
      // optimising compiles in the next 6 s, CPU counted against the edge process); after 10 s,
      // about 30, and the edge did more requests per CPU-second (scratch A/B, 2 runs each).
      for (const [send, ms] of [[edgeSend, ctx.quick ? 2000 : 10_000], [bareSend, ctx.quick ? 1000 : 5000]] as const) {
        await closedLoop({ concurrency: 32, durationMs: ms, graceMs: 3000, run: (_i, s) => send(s) })
      }
      ctx.log(`one-core warm-up: ${ctx.quick ? 2 : 10} s to the edge, ${ctx.quick ? 1 : 5} s to the bare passthrough, at concurrency 32`)
      for (let r = 0; r < rpsRounds; r++) {
        const row = await measure(nodeEdge, edgeSend)
        rpsRoundsOut.push(row)
        await sleep(200)
        const bare = await measure(bareInstant, bareSend)
        bareRoundsOut.push(bare)
        ctx.log(
          `one-core round ${r + 1}/${rpsRounds}: edge ${row.achieved_rps.toFixed(0)} req/s at ${(row.cpu_utilisation * 100).toFixed(0)} % of a core → ${row.requests_per_cpu_s.toFixed(0)} req per CPU-second${row.errors ? ` (${row.errors} errors)` : ''}; ` +
            `bare Hono passthrough ${bare.requests_per_cpu_s.toFixed(0)} req per CPU-second`,
        )
        await sleep(200)
      }
    } finally {
      unpin()
      await rpsAgent.close()
    }
    // The fair method: each proxy alone on core 0, instruction counts, stage profile.
    const fair = await runFairEdge(ctx, { edgeEnv, instantUrl: instant.url, model: INSTANT_MODEL, apiKey: BENCH_API_KEY })
    raw.fair = fair.raw
    notes.push(...fair.notes)

    for (const [phase, recs] of [['concurrency 1', c1], ['concurrency 64', c64]] as const) {
      for (const t of targets) {
        const failed = recs[t].filter((x) => x.error || x.status !== 200)
        if (failed.length) notes.push(`${phase}, ${t}: ${failed.length} of ${recs[t].length} requests failed and are left out of the percentiles (first: ${failed[0].error ?? `HTTP ${failed[0].status}`})`.slice(0, 400))
      }
    }

    const describe = (recs: RequestRecord[]) => ({
      requests: recs.length,
      errors: recs.filter((x) => x.error || x.status !== 200).length,
      ttfb_ms: summarize(okValues(recs, (x) => x.ttfbMs)),
      total_ms: summarize(okValues(recs, (x) => x.totalMs)),
    })
    raw.c1 = { rounds: c1Rounds, iterations_per_round: c1Iters, ...Object.fromEntries(targets.map((t) => [t, describe(c1[t])])), added_ttfb_p50_per_round: mapRound(c1Added), added_total_p50_per_round: mapRound(c1AddedTotal) }
    raw.c64 = { rounds: c64Rounds, requests_per_round: c64Requests, ...Object.fromEntries(c64Targets.map((t) => [t, describe(c64[t])])), added_ttfb_p99_per_round: mapRound(c64Added) }
    raw.one_core = {
      pinned: pinned ? 'edge (and the bare passthrough, measured separately) on core 0; upstream, bridge, redis and the load generator on core 1' : 'not pinned (no taskset)',
      concurrency: 32,
      edge_rounds: rpsRoundsOut,
      bare_hono_passthrough_rounds: bareRoundsOut,
      bare_hono_passthrough_requests_per_cpu_s: round(median(bareRoundsOut.map((x) => x.requests_per_cpu_s)), 0),
      edge_over_bare_hono: round(median(rpsRoundsOut.map((x, i) => x.requests_per_cpu_s / bareRoundsOut[i].requests_per_cpu_s))),
    }
    raw.bare_hono_added_ttfb_ms_p50_c1 = round(median(c1Added['bare-hono']))
    raw.bare_hono_added_ttfb_ms_p99_c64 = round(median(c64Added['bare-hono']))
    raw.edge_added_total_ms_p50_c1 = round(median(c1AddedTotal['node-edge']))
    if (origins.wrangler) raw.wrangler_added_total_ms_p50_c1 = round(median(c1AddedTotal.wrangler))
    notes.push(`Edge scenarios use ${modelDir} behind the edge (1 ONNX Runtime thread); requests/s on one core = completed requests per CPU-second of the pinned edge process.`)
    return {
      figures: {
        node_added_ttfb_ms_p50_c1: round(median(c1Added['node-edge'])),
        node_added_ttfb_ms_p99_c64: round(median(c64Added['node-edge'])),
        node_requests_per_s_one_core: round(median(rpsRoundsOut.map((x) => x.requests_per_cpu_s)), 0),
        wrangler_added_ttfb_ms_p50_c1: origins.wrangler ? round(median(c1Added.wrangler)) : null,
        ...(origins.wrangler ? { wrangler_added_ttfb_ms_p99_c64: round(median(c64Added.wrangler)) } : {}),
        ...streams.figures,
        ...fair.figures,
      },
      raw,
      notes,
    }
  } finally {
    await agent.close()
    for (const s of started.reverse()) await s.stop().catch(() => {})
  }
}

function okValues(recs: RequestRecord[], f: (x: RequestRecord) => number | undefined): number[] {
  const out: number[] = []
  for (const r of recs) {
    if (r.status !== 200 || r.error || r.cutOff) continue
    const v = f(r)
    if (v !== undefined) out.push(v)
  }
  return out
}

function mapRound(m: Record<string, number[]>): Record<string, number[]> {
  return Object.fromEntries(Object.entries(m).filter(([, v]) => v.length).map(([k, v]) => [k, v.map((x) => round(x))]))
}

function rotate<T>(xs: readonly T[], by: number): T[] {
  const k = by % xs.length
  return [...xs.slice(k), ...xs.slice(0, k)]
}
