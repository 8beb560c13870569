/**
 * Cache-affine routing (issue 16), through the Node edge: two GPU nodes of the engine model in one
 * region, heartbeating into a local registry (redis-server + the Upstash bridge), one edge with
 * affinity and one with `AFFINITY=off` (today's routing: least estimated RTT + queue wait).
 *
 * - `affine_cached_share` / `nonaffine_cached_share`: the multi-turn workload (prefix-chat.ts)
 *   through each edge, each with its own 512-token system prompt so neither run finds the
 *   other's blocks; cached ÷ prompt tokens of turns 2..T.
 * - `hot_prompt_max_over_mean_load`: 64 conversations opening with the very same system prompt
 *   and first message (one affinity key) at once, through the affinity edge; requests per node
 *   (from each node's own counters), most-loaded ÷ mean.
 */
import { Redis } from '@upstash/redis'
import { randomBytes } from 'node:crypto'
import { seedKey } from '../../infra/keys/key-admin.ts'
import { benchAgent, sendRequest } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startGpuNode, startNodeEdge, startUpstashProcs, type GpuNode } from '../lib/services.ts'
import { round } from '../lib/stats.ts'
import { laterTurnsCachedShare, runConversations } from './prefix-chat.ts'

const API_KEY = 'zl-prefixkey' + '0'.repeat(32 - 'prefixkey'.length)
const HOT_CONVERSATIONS = 64

export interface RoutingFigures {
  figures: Record<string, number>
  raw: Record<string, unknown>
}

export async function measureAffinity(ctx: BenchContext, modelDir: string, shape: { conversations: number; turns: number }): Promise<RoutingFigures> {
  const secret = randomBytes(24).toString('hex')
  const stops: Array<() => Promise<void>> = []
  const agent = benchAgent()
  try {
    ctx.log('routing: redis-server + Upstash bridge, two GPU nodes in one region, an edge with affinity and one without')
    const upstash = await startUpstashProcs()
    stops.push(() => upstash.stop())
    await seedKey(new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false }), API_KEY, { tenant: 'bench', name: 'prefix bench key', id: 'key_prefix', rpm: 1_000_000_000, tpm: 1_000_000_000_000 })
    const registry = { UPSTASH_REDIS_REST_URL: upstash.restUrl, UPSTASH_REDIS_REST_TOKEN: upstash.restToken }
    const nodes: GpuNode[] = []
    for (const id of ['bench-a', 'bench-b']) {
      const node = await startGpuNode({ modelDir, secret, env: { ...registry, NODE_ID: id, REGION: 'bench' } })
      stops.push(() => node.stop())
      nodes.push(node)
    }
    const edgeEnv = { ...registry, EDGE_SHARED_SECRET: secret, GPU_NODES: '[]', EDGE_REGION: 'bench', EDGE_LAT: '0', EDGE_LON: '0', RATE_LIMIT_FAILURE_MODE: 'closed' }
    const affine = await startNodeEdge(edgeEnv)
    stops.push(() => affine.stop())
    const plain = await startNodeEdge({ ...edgeEnv, AFFINITY: 'off' })
    stops.push(() => plain.stop())
    const headers = { authorization: `Bearer ${API_KEY}` }
    const model = nodes[0]!.model
    // Both nodes in the registry before anything is sent (they beat every second).
    await waitForRegistry(affine.url, headers, model)

    const users = (offset: number) => Array.from({ length: shape.conversations * shape.turns }, (_, i) => textPromptOfLength(modelDir, 64, offset + i).text)
    const workload = (origin: string, variant: number) =>
      runConversations({ origin, model, system: `${variant}: ${textPromptOfLength(modelDir, 512, variant).text}`, users: users(variant * 100), conversations: shape.conversations, turns: shape.turns, dispatcher: agent, headers })
    ctx.log(`routing: ${shape.conversations} conversations × ${shape.turns} turns through the affinity edge`)
    const withAffinity = await workload(affine.url, 1)
    ctx.log('routing: the same workload (another system prompt) through the edge without affinity')
    const without = await workload(plain.url, 2)
    const affineShare = laterTurnsCachedShare(withAffinity)
    const plainShare = laterTurnsCachedShare(without)
    ctx.log(`routing: cached share of turns 2–${shape.turns}: ${round(affineShare, 3)} with affinity, ${round(plainShare, 3)} without`)

    ctx.log(`routing: ${HOT_CONVERSATIONS} conversations with one system prompt and first message, at once`)
    const served = async () => Promise.all(nodes.map(async (n) => promValue(parseProm(await n.metricsText()), 'zl_request_success_total')))
    const before = await served()
    const hotSystem = `hot: ${textPromptOfLength(modelDir, 512, 3).text}`
    const hot = await Promise.all(Array.from({ length: HOT_CONVERSATIONS }, () => {
      const body = buildBody('openai-chat', { model, text: '', messages: [{ role: 'system', content: hotSystem }, { role: 'user', content: 'Hello, who are you?' }], maxTokens: 8, stream: true, ignoreEos: true })
      return sendRequest({ origin: affine.url, dialect: 'openai-chat', body, stream: true, headers, dispatcher: agent, timeoutMs: 300_000 })
    }))
    const failed = hot.find((r) => r.error || r.status !== 200)
    if (failed) throw new Error(`hot-prompt request failed: ${failed.error ?? failed.status}`)
    const after = await served()
    const perNode = after.map((a, i) => a - before[i]!)
    const mean = perNode.reduce((a, b) => a + b, 0) / perNode.length
    const maxOverMean = Math.max(...perNode) / mean
    ctx.log(`routing: hot prompt per node ${perNode.join(' / ')} (max ÷ mean ${round(maxOverMean, 2)})`)
    const decisions = (runs: Array<{ affinity?: string }>) => runs.reduce<Record<string, number>>((m, r) => ({ ...m, [r.affinity ?? 'none']: (m[r.affinity ?? 'none'] ?? 0) + 1 }), {})
    return {
      figures: { affine_cached_share: round(affineShare, 3), nonaffine_cached_share: round(plainShare, 3), hot_prompt_max_over_mean_load: round(maxOverMean, 2) },
      raw: {
        routing: {
          nodes: 2,
          affinity_decisions: decisions(withAffinity.flat()),
          hot_prompt_requests_per_node: perNode,
          hot_prompt_decisions: decisions(hot),
        },
      },
    }
  } finally {
    await agent.close()
    for (const stop of stops.reverse()) await stop()
  }
}

/** Waits (bounded) until the edge's /v1/regions lists both nodes. */
async function waitForRegistry(edgeUrl: string, headers: Record<string, string>, model: string): Promise<void> {
  const deadline = Date.now() + 30_000
  for (;;) {
    const res = await fetch(`${edgeUrl}/v1/regions`, { headers, signal: AbortSignal.timeout(5000) }).catch(() => undefined)
    const text = res?.ok ? await res.text() : ''
    if (text.includes('bench-a') && text.includes('bench-b')) return
    if (Date.now() > deadline) throw new Error(`the edge's registry did not list both nodes (model ${model}) within 30 s`)
    await new Promise((r) => setTimeout(r, 250))
  }
}
