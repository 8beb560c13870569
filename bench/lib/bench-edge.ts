/**
 * The edge the bench measures, set up the same way wherever it runs (the edge section and the
 * probes that run one of its parts alone): one API key with limits no run reaches, seeded into
 * the limiter's Redis, and the edge's environment — the local Upstash bridge, a signing secret,
 * static nodes in one region (`bench`, where the edge itself is), and rate limiting that fails
 * closed, so a limiter that cannot keep up shows as refusals, not as requests let through.
 */
import { Redis } from '@upstash/redis'
import { seedKey } from '../../infra/keys/key-admin.ts'
import type { LocalUpstashProcs } from './services.ts'

/** The model the instant upstream (rig/instant-upstream.ts) answers for. */
export const INSTANT_MODEL = 'bench-instant'

export const BENCH_API_KEY = 'zl-benchkey' + '0'.repeat(32 - 'benchkey'.length)

/** Seeds BENCH_API_KEY (tenant `bench`) into the limiter's Redis. */
export async function seedBenchKey(upstash: Pick<LocalUpstashProcs, 'restUrl' | 'restToken'>): Promise<void> {
  await seedKey(new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false }), BENCH_API_KEY, { tenant: 'bench', name: 'bench key', id: 'key_bench', rpm: 1_000_000_000, tpm: 1_000_000_000_000 })
}

/** The edge's environment with `nodes` (id, url, model) as its static GPU_NODES, all in the edge's region. */
export function benchEdgeEnv(upstash: Pick<LocalUpstashProcs, 'restUrl' | 'restToken'>, secret: string, nodes: ReadonlyArray<{ id: string; url: string; model: string }>): Record<string, string> {
  return {
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: secret,
    GPU_NODES: JSON.stringify(nodes.map((n) => ({ id: n.id, url: n.url, region: 'bench', lat: 39, lon: -77.5, models: [n.model] }))),
    RATE_LIMIT_FAILURE_MODE: 'closed',
    EDGE_REGION: 'bench',
    EDGE_LAT: '39',
    EDGE_LON: '-77.5',
  }
}
