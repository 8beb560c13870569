/**
 * `npm start`'s flags (`--regions N`, `--nodes-per-region N`, `--edge miniflare|wrangler|wrangler-inspector|node`, `--model DIR`,
 * `--wan`, `--rtt us-east:eu-west=70[,…]`: stack-wan.ts, `--node-nice N`: the GPU nodes' CPU priority, default 10, 0 off) and
 * dev credentials from the environment → StackOptions, parsed once with zod.
 */
import { parseArgs } from 'node:util'
import { z } from 'zod'
import { DEFAULT_EDGE_KIND, EDGE_KINDS, LOCAL, MAX_NODES_PER_REGION, REGIONS, regionsFor, type StackOptions } from './stack-config.ts'
import { parseWanFlags } from './stack-wan.ts'
import { DEFAULT_MODEL_DIR } from '../../gpu-node/src/config.ts'

const Flags = z.object({
  regions: z.coerce.number().int().min(1).max(9).default(REGIONS.length),
  'nodes-per-region': z.coerce.number().int().min(1).max(MAX_NODES_PER_REGION).default(1),
  edge: z.enum(EDGE_KINDS).default(DEFAULT_EDGE_KIND),
  model: z.string().min(1).default(DEFAULT_MODEL_DIR),
  // stack-config.ts nodeNice: the simulated edge keeps the CPU a separate machine would give it.
  'node-nice': z.coerce.number().int().min(0).max(19).default(10),
})

export function parseStackFlags(argv: string[], env: Record<string, string | undefined>): StackOptions {
  const { values } = parseArgs({
    args: argv,
    options: { regions: { type: 'string' }, 'nodes-per-region': { type: 'string' }, edge: { type: 'string' }, model: { type: 'string' }, 'node-nice': { type: 'string' }, wan: { type: 'boolean' }, rtt: { type: 'string', multiple: true } },
  })
  const { wan, rtt, ...rest } = values
  const parsed = Flags.safeParse(rest)
  if (!parsed.success) throw new Error(`bad flags: ${parsed.error.issues.map((i) => `--${i.path.join('.')}: ${i.message}`).join('; ')}`)
  const wanOpts = parseWanFlags(wan, rtt, regionsFor(parsed.data.regions))
  return {
    ...(wanOpts ? { wan: wanOpts } : {}),
    regions: parsed.data.regions,
    nodesPerRegion: parsed.data['nodes-per-region'],
    edge: parsed.data.edge,
    nodeNice: parsed.data['node-nice'],
    modelDir: parsed.data.model,
    devApiKey: env.DEV_API_KEY ?? LOCAL.devApiKey,
    adminToken: env.DEV_ADMIN_TOKEN ?? LOCAL.adminToken,
  }
}

