/**
 * Where the edge's CPU goes, by stage: the Node edge pinned to core 0 with V8's
 * sampling profiler preloaded (bench/rig/cpu-profile.ts), the load generator and the instant
 * upstream on core 1. After a warm-up, the profiler runs over a fixed number of non-streaming
 * ~1 kB requests at concurrency 8; bench/lib/cpu-profile-stages.ts charges each sample to the
 * stage of the innermost frame of ours on its stack. Shares of the edge's busy (non-idle) time.
 */
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { benchAgent, sendRequest } from '../load/client.ts'
import { closedLoop } from '../load/generators.ts'
import { stagesOf, withSources, type CpuProfile, type StageShare } from '../lib/cpu-profile-stages.ts'
import { hasTaskset, pinSelf } from '../lib/procs.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startNodeEdge } from '../lib/services.ts'
import { round } from '../lib/stats.ts'
import { requestBodies, type RequestKind } from './edge-instructions.ts'
import type { PinnedEdgeInput } from './edge-pinned.ts'

const PROBE = pathToFileURL(join(import.meta.dirname, '..', 'rig', 'cpu-profile.ts')).href

export async function profileEdgeStages(ctx: BenchContext, input: PinnedEdgeInput): Promise<{ requests: number; samples: number; stages: StageShare[] }> {
  const { requests, profile } = await recordEdgeProfile(ctx, input)
  const stages = stagesOf(profile).map((s) => ({ ...s, share: round(s.share, 4) }))
  const samples = stages.reduce((n, s) => n + s.samples, 0)
  ctx.log(`profile: ${requests} requests, ${samples} busy samples; ${stages.slice(0, 6).map((s) => `${s.stage} ${(s.share * 100).toFixed(1)} %`).join(', ')}`)
  return { requests, samples, stages }
}

/** The pinned edge's CPU profile over `requests` requests of one kind at concurrency 8, after a warm-up. */
export async function recordEdgeProfile(ctx: BenchContext, input: PinnedEdgeInput, kind: RequestKind = 'non_streaming_1kb'): Promise<{ requests: number; profile: CpuProfile }> {
  const out = join(mkdtempSync(join(tmpdir(), 'zl-bench-cpuprof-')), 'edge.cpuprofile')
  const pinned = hasTaskset()
  const unpinSelf = pinned ? pinSelf('1') : () => {}
  const agent = benchAgent()
  const edge = await startNodeEdge({ ...input.edgeEnv, BENCH_CPU_PROFILE_OUT: out }, { preload: [PROBE], ...(pinned ? { cpus: '0' } : {}) })
  try {
    const { body, stream } = requestBodies(input.model)[kind]
    const send = (signal: AbortSignal) => sendRequest({ origin: edge.url, dialect: 'openai-chat', body, stream, headers: { authorization: `Bearer ${input.apiKey}` }, dispatcher: agent, signal, timeoutMs: 20_000 })
    await closedLoop({ concurrency: 8, durationMs: ctx.quick ? 4000 : 10_000, graceMs: 5000, run: (_i, s) => send(s) })
    const requests = ctx.quick ? 4000 : 20_000
    const started = edge.proc.waitFor((_l, j) => j?.msg === 'cpu-profile started', 10_000)
    process.kill(edge.proc.pid, 'SIGUSR2')
    await started
    const run = await closedLoop({ concurrency: 8, durationMs: 120_000, graceMs: 5000, maxRequests: requests, run: (_i, s) => send(s) })
    const written = edge.proc.waitFor((_l, j) => j?.msg === 'cpu-profile written', 30_000)
    process.kill(edge.proc.pid, 'SIGUSR2')
    await written
    const profile = JSON.parse(readFileSync(out, 'utf8')) as CpuProfile
    return { requests: run.results.length, profile: edge.module ? withSources(profile, edge.module) : profile }
  } finally {
    unpinSelf()
    await agent.close()
    await edge.stop()
  }
}
