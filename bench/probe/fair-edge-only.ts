/**
 * One part of the edge section's fair phase alone, for a change's before/after without the rest
 * of the section: `npx tsx bench/probe/fair-edge-only.ts instructions|pinned|functions|pieces [--quick]`
 * runs the instruction counts (bench/scenarios/edge-instructions.ts), the pinned latency rounds
 * (edge-pinned.ts), the edge's CPU profile (edge-profile.ts) as self time by function
 * (`--kind non_streaming_1kb|streaming_1kb|non_streaming_100kb`, default the first), or the
 * per-piece counts (piece-costs.ts: the body check, the upstream client). Same set-up
 * as the edge section's fair phase: redis-server + the Upstash bridge and the instant upstream on
 * core 1, a seeded key, rate limits and signing on. Prints the figures and the raw ratios.
 */
import { randomBytes } from 'node:crypto'
import { BENCH_API_KEY, benchEdgeEnv, INSTANT_MODEL, seedBenchKey } from '../lib/bench-edge.ts'
import { hasTaskset } from '../lib/procs.ts'
import { leafFunctionsOf } from '../lib/cpu-profile-stages.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startInstantUpstream, startUpstashProcs } from '../lib/services.ts'
import { REQUEST_KINDS, runEdgeInstructions, type RequestKind } from '../scenarios/edge-instructions.ts'
import { recordEdgeProfile } from '../scenarios/edge-profile.ts'
import { runPinnedEdge, type PinnedEdgeInput } from '../scenarios/edge-pinned.ts'
import { measureUpstreamCost, measureValidationCost } from '../scenarios/piece-costs.ts'

type Part = (ctx: BenchContext, input: PinnedEdgeInput) => Promise<{ figures: Record<string, number | null>; raw: Record<string, unknown>; notes: string[] }>
const parts: Record<string, { run: Part; show: (raw: Record<string, unknown>) => unknown }> = {
  instructions: { run: runEdgeInstructions, show: (raw) => ({ edge_over_bare: raw.edge_over_bare, edge_over_bare_with_clock: raw.edge_over_bare_with_clock, edge_over_bare_h2: raw.edge_over_bare_h2, bare_h2_over_bare: raw.bare_h2_over_bare }) },
  pinned: { run: runPinnedEdge, show: (raw) => raw },
  functions: { run: profileFunctions, show: (raw) => raw },
  pieces: { run: pieceCosts, show: (raw) => raw },
}

async function pieceCosts(ctx: BenchContext, input: PinnedEdgeInput) {
  const raw = { body_check_per_call: await measureValidationCost(ctx), upstream_client_per_request: await measureUpstreamCost(ctx, input.instantUrl) }
  return { figures: {}, raw, notes: raw.body_check_per_call ? [] : ['valgrind (callgrind) is not installed'] }
}

async function profileFunctions(ctx: BenchContext, input: PinnedEdgeInput) {
  const at = process.argv.indexOf('--kind')
  const kind = (at >= 0 ? process.argv[at + 1] : 'non_streaming_1kb') as RequestKind
  if (!REQUEST_KINDS.includes(kind)) throw new Error(`--kind: one of ${REQUEST_KINDS.join(', ')}`)
  const { requests, profile } = await recordEdgeProfile(ctx, input, kind)
  const fns = leafFunctionsOf(profile)
  for (const f of fns) console.log(`${(f.share * 100).toFixed(1).padStart(5)} %  ${f.fn}`)
  return { figures: {}, raw: { kind, requests, samples_with_idle: profile.samples.length }, notes: [] }
}
const part = parts[process.argv[2] ?? '']
if (!part) {
  console.error(`usage: fair-edge-only.ts ${Object.keys(parts).join('|')} [--quick] [--kind ${REQUEST_KINDS.join('|')}] (--kind: functions only)`)
  process.exit(2)
}
const quick = process.argv.includes('--quick')
const others = hasTaskset() ? { cpus: '1' } : {}
const upstash = await startUpstashProcs(others)
const instant = await startInstantUpstream(others)
try {
  await seedBenchKey(upstash)
  const edgeEnv = benchEdgeEnv(upstash, randomBytes(24).toString('hex'), [{ id: 'bench-instant', url: instant.url, model: INSTANT_MODEL }])
  const out = await part.run({ quick, log: (m) => console.log(m) } as BenchContext, { edgeEnv, instantUrl: instant.url, model: INSTANT_MODEL, apiKey: BENCH_API_KEY })
  console.log(JSON.stringify({ figures: out.figures, raw: part.show(out.raw), notes: out.notes }, null, 2))
} finally {
  await instant.stop()
  await upstash.stop()
}
