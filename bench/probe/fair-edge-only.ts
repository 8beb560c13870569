/**
 * One part of the edge section's fair phase alone, for a change's before/after without the rest
 * of the section: `npx tsx bench/probe/fair-edge-only.ts instructions|pinned [--quick]` runs the
 * instruction counts (bench/scenarios/edge-instructions.ts) or the pinned latency rounds
 * (edge-pinned.ts). Same set-up as the edge section's fair phase: redis-server + the Upstash
 * bridge and the instant upstream on core 1, a seeded key, rate limits and signing on. Prints the
 * figures and the raw ratios.
 */
import { randomBytes } from 'node:crypto'
import { BENCH_API_KEY, benchEdgeEnv, INSTANT_MODEL, seedBenchKey } from '../lib/bench-edge.ts'
import { hasTaskset } from '../lib/procs.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startInstantUpstream, startUpstashProcs } from '../lib/services.ts'
import { runEdgeInstructions } from '../scenarios/edge-instructions.ts'
import { runPinnedEdge, type PinnedEdgeInput } from '../scenarios/edge-pinned.ts'

type Part = (ctx: BenchContext, input: PinnedEdgeInput) => Promise<{ figures: Record<string, number | null>; raw: Record<string, unknown>; notes: string[] }>
const parts: Record<string, { run: Part; show: (raw: Record<string, unknown>) => unknown }> = {
  instructions: { run: runEdgeInstructions, show: (raw) => ({ edge_over_bare: raw.edge_over_bare, edge_over_bare_h2: raw.edge_over_bare_h2, bare_h2_over_bare: raw.bare_h2_over_bare }) },
  pinned: { run: runPinnedEdge, show: (raw) => raw },
}
const part = parts[process.argv[2] ?? '']
if (!part) {
  console.error(`usage: fair-edge-only.ts ${Object.keys(parts).join('|')} [--quick]`)
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
