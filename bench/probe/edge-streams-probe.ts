/**
 * `npx tsx bench/probe/edge-streams-probe.ts [--quick] [--controls a,b]`: edge-streams.ts alone
 * (the node, the Node edge, npm start's default Workers edge, and the chosen controls), without the
 * rest of the edge section, for comparing local Workers set-ups in one run. Prints the result JSON.
 */
import { randomBytes } from 'node:crypto'
import { parseArgs } from 'node:util'
import { benchAgent } from '../load/client.ts'
import { BENCH_API_KEY, benchEdgeEnv, seedBenchKey } from '../lib/bench-edge.ts'
import { startGpuNode, startNodeEdge, startUpstashProcs, startWranglerDev } from '../lib/services.ts'
import { runEdgeStreams, type EdgeStreamsInput } from '../scenarios/edge-streams.ts'

const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false }, controls: { type: 'string' } } })
const modelDir = 'models/tiny'
const secret = randomBytes(24).toString('hex')
const stops: Array<() => Promise<void>> = []
try {
  const upstash = await startUpstashProcs()
  stops.push(() => upstash.stop())
  await seedBenchKey(upstash)
  const node = await startGpuNode({ modelDir, secret, env: { INTRA_OP_THREADS: '1' } })
  stops.push(() => node.stop())
  const edgeEnv = benchEdgeEnv(upstash, secret, [{ id: 'bench-node', url: node.url, model: node.model }])
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
    apiKey: BENCH_API_KEY,
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
