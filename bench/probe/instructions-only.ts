/**
 * The edge section's instruction counts alone (bench/scenarios/edge-instructions.ts), for a
 * change's before/after without the rest of the section: `npx tsx bench/probe/instructions-only.ts [--quick]`.
 * Same set-up as the edge section's fair phase: redis-server + the Upstash bridge and the instant
 * upstream on core 1, a seeded key, rate limits and signing on. Prints the counts and the ratios.
 */
import { randomBytes } from 'node:crypto'
import { BENCH_API_KEY, benchEdgeEnv, INSTANT_MODEL, seedBenchKey } from '../lib/bench-edge.ts'
import { hasTaskset } from '../lib/procs.ts'
import { startInstantUpstream, startUpstashProcs } from '../lib/services.ts'
import { runEdgeInstructions } from '../scenarios/edge-instructions.ts'

const quick = process.argv.includes('--quick')
const others = hasTaskset() ? { cpus: '1' } : {}
const upstash = await startUpstashProcs(others)
const instant = await startInstantUpstream(others)
try {
  await seedBenchKey(upstash)
  const edgeEnv = benchEdgeEnv(upstash, randomBytes(24).toString('hex'), [{ id: 'bench-instant', url: instant.url, model: INSTANT_MODEL }])
  const out = await runEdgeInstructions({ quick, log: (m) => console.log(m) }, { edgeEnv, instantUrl: instant.url, model: INSTANT_MODEL, apiKey: BENCH_API_KEY })
  console.log(JSON.stringify({ figures: out.figures, edge_over_bare: out.raw.edge_over_bare, edge_over_bare_h2: out.raw.edge_over_bare_h2, bare_h2_over_bare: out.raw.bare_h2_over_bare, notes: out.notes }, null, 2))
} finally {
  await instant.stop()
  await upstash.stop()
}
