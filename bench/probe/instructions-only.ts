/**
 * The edge section's instruction counts alone (bench/scenarios/edge-instructions.ts), for a
 * change's before/after without the rest of the section: `npx tsx bench/probe/instructions-only.ts [--quick]`.
 * Same set-up as the edge section's fair phase: redis-server + the Upstash bridge and the instant
 * upstream on core 1, a seeded key, rate limits and signing on. Prints the counts and the ratios.
 */
import { randomBytes } from 'node:crypto'
import { Redis } from '@upstash/redis'
import { seedKey } from '../../infra/keys/key-admin.ts'
import { INSTANT_MODEL } from './instant-upstream.ts'
import { hasTaskset } from '../lib/procs.ts'
import { startInstantUpstream, startUpstashProcs } from '../lib/services.ts'
import { runEdgeInstructions } from '../scenarios/edge-instructions.ts'

const API_KEY = 'zl-benchkey' + '0'.repeat(32 - 'benchkey'.length)
const quick = process.argv.includes('--quick')
const others = hasTaskset() ? { cpus: '1' } : {}
const upstash = await startUpstashProcs(others)
const instant = await startInstantUpstream(others)
try {
  await seedKey(new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false }), API_KEY, { tenant: 'bench', name: 'bench key', id: 'key_bench', rpm: 1_000_000_000, tpm: 1_000_000_000_000 })
  const edgeEnv = {
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: randomBytes(24).toString('hex'),
    GPU_NODES: JSON.stringify([{ id: 'bench-instant', url: instant.url, region: 'bench', lat: 39, lon: -77.5, models: [INSTANT_MODEL] }]),
    RATE_LIMIT_FAILURE_MODE: 'closed',
    EDGE_REGION: 'bench',
    EDGE_LAT: '39',
    EDGE_LON: '-77.5',
  }
  const out = await runEdgeInstructions({ quick, log: (m) => console.log(m) }, { edgeEnv, instantUrl: instant.url, model: INSTANT_MODEL, apiKey: API_KEY })
  console.log(JSON.stringify({ figures: out.figures, edge_over_bare: out.raw.edge_over_bare, edge_over_bare_h2: out.raw.edge_over_bare_h2, bare_h2_over_bare: out.raw.bare_h2_over_bare, notes: out.notes }, null, 2))
} finally {
  await instant.stop()
  await upstash.stop()
}
