/**
 * `npx tsx bench/probe/edge-streams-probe.ts [--quick] [--controls a,b]`: edge-streams.ts alone
 * (the node, the Node edge, npm start's default Workers edge, and the chosen controls), without the
 * rest of the edge section, for comparing local Workers set-ups in one run. Prints the result JSON.
 */
import { randomBytes } from 'node:crypto'
import { parseArgs } from 'node:util'
import { Redis } from '@upstash/redis'
import { seedKey } from '../../infra/keys/key-admin.ts'
import { benchAgent } from '../load/client.ts'
import { startGpuNode, startNodeEdge, startUpstashProcs, startWranglerDev } from '../lib/services.ts'
import { runEdgeStreams, type EdgeStreamsInput } from '../scenarios/edge-streams.ts'

const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false }, controls: { type: 'string' } } })
const API_KEY = 'zl-benchkey' + '0'.repeat(32 - 'benchkey'.length)
const modelDir = 'models/tiny'
const secret = randomBytes(24).toString('hex')
const stops: Array<() => Promise<void>> = []
try {
  const upstash = await startUpstashProcs()
  stops.push(() => upstash.stop())
  await seedKey(new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false }), API_KEY, { tenant: 'bench', name: 'bench key', id: 'key_bench', rpm: 1_000_000_000, tpm: 1_000_000_000_000 })
  const node = await startGpuNode({ modelDir, secret, env: { INTRA_OP_THREADS: '1' } })
  stops.push(() => node.stop())
  const edgeEnv: Record<string, string> = {
    UPSTASH_REDIS_REST_URL: upstash.restUrl,
    UPSTASH_REDIS_REST_TOKEN: upstash.restToken,
    EDGE_SHARED_SECRET: secret,
    GPU_NODES: JSON.stringify([{ id: 'bench-node', url: node.url, region: 'bench', lat: 39, lon: -77.5, models: [node.model] }]),
    RATE_LIMIT_FAILURE_MODE: 'closed',
    EDGE_REGION: 'bench',
    EDGE_LAT: '39',
    EDGE_LON: '-77.5',
  }
  const nodeEdge = await startNodeEdge(edgeEnv)
  stops.push(() => nodeEdge.stop())
  const wrangler = await startWranglerDev(edgeEnv)
  stops.push(() => wrangler.stop())
  const controls = values.controls?.split(',').filter(Boolean) as EdgeStreamsInput['controls']
  const res = await runEdgeStreams({
    ctx: { quick: values.quick!, log: (m) => console.error(`[probe] ${m}`) },
    modelDir,
    node: { url: node.url, model: node.model },
    secret,
    apiKey: API_KEY,
    edgeEnv,
    nodeEdgeUrl: nodeEdge.url,
    wranglerUrl: wrangler.url,
    dispatcher: benchAgent(),
    ...(controls ? { controls } : {}),
  })
  console.log(JSON.stringify(res, null, 1))
} finally {
  for (const s of stops.reverse()) await s().catch(() => {})
}
