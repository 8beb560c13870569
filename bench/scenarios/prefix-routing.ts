/**
 * What cache-affine routing buys, against the routers that do not know where a prefix is cached
 * (bench/lib/baseline-routers.ts): redis-server + the Upstash bridge, NODES GPU nodes of the
 * engine model in one region heartbeating into it, and the Node edge with affinity in front.
 *
 * The multi-turn workload (prefix-chat.ts: a 512-token system prompt shared by every
 * conversation, ~64-token user turns, 32 tokens generated) runs three ways: through the edge,
 * and straight to the nodes by round robin and by least outstanding requests — the baselines
 * llm-d and Dynamo are compared with. CONCURRENCY conversations are in flight at once, more than
 * the nodes, so the baselines spread a conversation's turns over every node (with round robin a
 * turn finds its conversation's earlier turns cached on its node about one time in NODES). Each
 * round runs a wave of conversations of every mode, the modes' order rotating from round to round
 * so drift over the run falls on all alike; each mode has its own system prompt, so no mode finds
 * another's blocks. A quick run has fewer rounds, in the same regime.
 *
 * - `affine_cached_share`, `round_robin_cached_share`, `least_outstanding_cached_share`: cached ÷
 *   prompt tokens of turns 2..T;
 * - `round_robin_over_affine_warm_ttft`, `least_outstanding_over_affine_warm_ttft`: p50 TTFT of
 *   turns 2..T of the baseline ÷ through the affinity edge (above 1: affinity answers sooner);
 * - `hot_prompt_max_over_mean_load`: 64 conversations opening with the very same system prompt and
 *   first message (one affinity key) at once, through the affinity edge; requests per node (from
 *   each node's own counters), most-loaded ÷ mean.
 * - `responses_chain_cached_share`, `responses_chain_over_chat_warm_ttft`: stored conversations
 *   (`previous_response_id`) against chat ones, one at a time (measureStoredChains).
 */
import { Redis } from '@upstash/redis'
import { randomBytes } from 'node:crypto'
import { seedKey } from '../../infra/keys/key-admin.ts'
import type { Dispatcher } from 'undici'
import { benchAgent, sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { leastOutstanding, oneOrigin, roundRobin, type Router } from '../lib/baseline-routers.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { seededRandom } from '../../shared/test/support/seeded-random.ts'
import { causeOf, metricsRetries, startGpuNode, startNodeEdge, startUpstashProcs, type GpuNode } from '../lib/services.ts'
import { median, round } from '../lib/stats.ts'
import { laterTurns, laterTurnsCachedShare, runConversations } from './prefix-chat.ts'

const API_KEY = 'zl-prefixkey' + '0'.repeat(32 - 'prefixkey'.length)
const TENANT = 'bench'
const HOT_CONVERSATIONS = 64
/**
 * Mean of a user's pause before each later turn: exponential, seeded, the same pauses for every
 * mode. Without pauses the conversations, started together with equal lengths, stay in lockstep:
 * the ones on a node finish together and all come back to it together, a burst of prefills that
 * queue behind each other, where round robin scatters each burst over the nodes. That is the
 * benchmark's artifact, not users': measured, turns 2–6 p50 TTFT round robin ÷ affinity 0.69
 * without pauses, 1.11 with these.
 */
const THINK_MEAN_MS = 1000
const thinkTimes = (round: number) => (conversation: number, turn: number) => -Math.log(1 - seededRandom(round * 100_000 + conversation * 100 + turn)()) * THINK_MEAN_MS
/** Node counters read per mode (requests served first). */
const NODE_COUNTERS = ['zl_request_success_total', 'zl_time_to_first_token_seconds_sum', 'zl_time_to_first_token_seconds_count', 'zl_request_queue_time_seconds_sum', 'zl_step_duration_seconds_sum', 'zl_prompt_tokens_total']
/** Four nodes, two to a core of the machine's first two, so round robin spreads a conversation over four. */
const NODES = 4
/** Conversations in flight at once: four per node. */
const CONCURRENCY = 4 * NODES
const TURNS = 6

export interface RoutingFigures {
  figures: Record<string, number>
  raw: Record<string, unknown>
}

export async function measureAffinity(ctx: BenchContext, modelDir: string): Promise<RoutingFigures> {
  const rounds = ctx.quick ? 1 : 3
  const secret = randomBytes(24).toString('hex')
  const stops: Array<() => Promise<void>> = []
  const agent = benchAgent()
  try {
    ctx.log(`routing: redis-server + Upstash bridge, ${NODES} GPU nodes in one region, the Node edge with affinity`)
    const upstash = await startUpstashProcs()
    stops.push(() => upstash.stop())
    await seedKey(new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false }), API_KEY, { tenant: TENANT, name: 'prefix bench key', id: 'key_prefix', rpm: 1_000_000_000, tpm: 1_000_000_000_000 })
    const registry = { UPSTASH_REDIS_REST_URL: upstash.restUrl, UPSTASH_REDIS_REST_TOKEN: upstash.restToken }
    // Each node pinned, one ONNX Runtime thread, two to a core: every mode below keeps the nodes
    // evenly loaded, so each node's share of the machine is the same whatever the mode. Unpinned
    // (every node's threads on every core), the run was fastest with all the work on one node (one
    // process batching everything, the others idle), whatever the cache did.
    const nodes: GpuNode[] = await Promise.all(
      Array.from({ length: NODES }, async (_, i) => {
        const node = await startGpuNode({ modelDir, secret, cpus: String(i % 2), env: { ...registry, NODE_ID: `bench-${i}`, REGION: 'bench', INTRA_OP_THREADS: '1' } })
        stops.push(() => node.stop())
        return node
      }),
    )
    const edge = await startNodeEdge({ ...registry, EDGE_SHARED_SECRET: secret, GPU_NODES: '[]', EDGE_REGION: 'bench', EDGE_LAT: '0', EDGE_LON: '0', RATE_LIMIT_FAILURE_MODE: 'closed' })
    stops.push(() => edge.stop())
    const headers = { authorization: `Bearer ${API_KEY}` }
    const model = nodes[0]!.model
    // Every node in the registry before anything is sent (they beat every second).
    await waitForRegistry(edge.url, headers, nodes.length)

    const direct = { nodes: nodes.map((n) => n.url), secret, tenant: TENANT }
    const modes: Router[] = [oneOrigin('affinity', edge.url, headers), roundRobin(direct), leastOutstanding(direct)]

    /** Each node's counters now: requests served, and the node's own TTFT, queue and step sums. */
    const counters = async () =>
      Promise.all(
        nodes.map(async (n, i) => {
          const text = await n.metricsText().catch((e: unknown) => {
            throw new Error(`node bench-${i}: GET /metrics failed twice (${causeOf(e)}); its last lines:\n${n.proc.tail()}`)
          })
          const m = parseProm(text)
          return NODE_COUNTERS.map((name) => promValue(m, name))
        }),
      )
    const served = async () => (await counters()).map((c) => c[0]!)
    const runs = new Map<string, RequestRecord[][]>(modes.map((m) => [m.name, []]))
    const modeLoad = new Map<string, number[]>(modes.map((m) => [m.name, nodes.map(() => 0)]))
    /** Per mode, NODE_COUNTERS summed over the nodes and its rounds. */
    const modeCounters = new Map<string, number[]>(modes.map((m) => [m.name, NODE_COUNTERS.map(() => 0)]))
    for (let r = 0; r < rounds; r++) {
      for (let k = 0; k < modes.length; k++) {
        const mode = modes[(r + k) % modes.length]!
        const variant = 1 + modes.indexOf(mode)
        const first = r * CONCURRENCY
        ctx.log(`routing: round ${r + 1}/${rounds}, ${CONCURRENCY} conversations × ${TURNS} turns at once, ${mode.name}`)
        const users = Array.from({ length: CONCURRENCY * TURNS }, (_, i) => textPromptOfLength(modelDir, 64, variant * 1000 + first * TURNS + i).text)
        const before = await counters()
        runs.get(mode.name)!.push(...(await runConversations({ router: mode, model, system: `${variant}: ${textPromptOfLength(modelDir, 512, variant).text}`, users, conversations: CONCURRENCY, turns: TURNS, concurrency: CONCURRENCY, dispatcher: agent, thinkMs: thinkTimes(r) })))
        const after = await counters()
        modeLoad.set(mode.name, modeLoad.get(mode.name)!.map((n, i) => n + after[i]![0]! - before[i]![0]!))
        modeCounters.set(mode.name, modeCounters.get(mode.name)!.map((sum, j) => sum + after.reduce((t, c, i) => t + c[j]! - before[i]![j]!, 0)))
      }
    }
    /** What the nodes themselves saw of a mode's requests: their TTFT and admission-queue wait (means), and the steps they ran. */
    const nodeSide = (name: string) => {
      const [, ttftSum, ttftCount, queueSum, stepSeconds, promptTokens] = modeCounters.get(name)!
      return { ttft_mean_ms: round((1000 * ttftSum!) / ttftCount!, 1), queue_mean_ms: round((1000 * queueSum!) / ttftCount!, 1), step_seconds: round(stepSeconds!, 1), prompt_tokens: promptTokens! }
    }
    const share = (name: string) => laterTurnsCachedShare(runs.get(name)!)
    const warmTtft = (name: string) => median(laterTurns(runs.get(name)!).map((t) => t.ttftMs!))
    for (const m of modes) {
      const node = nodeSide(m.name)
      ctx.log(`routing: ${m.name}: cached share of turns 2–${TURNS} ${round(share(m.name), 3)}, their p50 TTFT ${round(warmTtft(m.name), 1)} ms, requests per node ${modeLoad.get(m.name)!.join(' / ')}; at the nodes: TTFT mean ${node.ttft_mean_ms} ms, of it queued ${node.queue_mean_ms} ms, ${node.step_seconds} s of steps`)
    }

    ctx.log(`routing: ${HOT_CONVERSATIONS} conversations with one system prompt and first message, at once`)
    const before = await served()
    const hotSystem = `hot: ${textPromptOfLength(modelDir, 512, 3).text}`
    const hot = await Promise.all(Array.from({ length: HOT_CONVERSATIONS }, () => {
      const body = buildBody('openai-chat', { model, text: '', messages: [{ role: 'system', content: hotSystem }, { role: 'user', content: 'Hello, who are you?' }], maxTokens: 8, stream: true, ignoreEos: true })
      return sendRequest({ origin: edge.url, dialect: 'openai-chat', body, stream: true, headers, dispatcher: agent, timeoutMs: 300_000 })
    }))
    const failed = hot.find((r) => r.error || r.status !== 200)
    if (failed) throw new Error(`hot-prompt request failed: ${failed.error ?? failed.status}`)
    const after = await served()
    const perNode = after.map((a, i) => a - before[i]!)
    const mean = perNode.reduce((a, b) => a + b, 0) / perNode.length
    const maxOverMean = Math.max(...perNode) / mean
    ctx.log(`routing: hot prompt per node ${perNode.join(' / ')} (max ÷ mean ${round(maxOverMean, 2)})`)
    const stored = await measureStoredChains(ctx, { edge: oneOrigin('affinity', edge.url, headers), model, modelDir, agent })
    const decisions = (records: Array<{ affinity?: string }>) => records.reduce<Record<string, number>>((m, r) => ({ ...m, [r.affinity ?? 'none']: (m[r.affinity ?? 'none'] ?? 0) + 1 }), {})
    const [affinity, rr, lo] = modes.map((m) => m.name) as [string, string, string]
    return {
      figures: {
        affine_cached_share: round(share(affinity), 3),
        round_robin_cached_share: round(share(rr), 3),
        least_outstanding_cached_share: round(share(lo), 3),
        round_robin_over_affine_warm_ttft: round(warmTtft(rr) / warmTtft(affinity), 2),
        least_outstanding_over_affine_warm_ttft: round(warmTtft(lo) / warmTtft(affinity), 2),
        hot_prompt_max_over_mean_load: round(maxOverMean, 2),
        ...stored.figures,
      },
      raw: {
        routing: {
          nodes: NODES,
          concurrency: CONCURRENCY,
          turns: TURNS,
          conversations_per_mode: rounds * CONCURRENCY,
          warm_turns_ttft_p50_ms: Object.fromEntries(modes.map((m) => [m.name, round(warmTtft(m.name), 1)])),
          requests_per_node: Object.fromEntries(modeLoad),
          at_the_nodes: Object.fromEntries(modes.map((m) => [m.name, nodeSide(m.name)])),
          metrics_get_retries: [...metricsRetries],
          affinity_decisions: decisions(runs.get(affinity)!.flat()),
          hot_prompt_requests_per_node: perNode,
          hot_prompt_decisions: decisions(hot),
        },
        stored_chains: stored.raw,
      },
    }
  } finally {
    await agent.close()
    for (const stop of stops.reverse()) await stop()
  }
}

/**
 * A stored conversation against a chat one, one conversation at a time through the affinity edge:
 * the same turns (512-token system prompt, ~64-token user turns, 32 tokens generated), sent as
 * chat (the whole conversation every turn) and as the Responses API (only the new turn, naming
 * the previous answer). Each mode its own prompts, so neither finds the other's blocks; modes
 * alternate conversation by conversation, so drift falls on both.
 * - `responses_chain_cached_share`: cached ÷ input tokens of the stored conversation's turns 2..T;
 * - `responses_chain_over_chat_warm_ttft`: their p50 TTFT ÷ the chat turns' (the node reads the
 *   stored conversation before tokenizing, and writes each answer before its end).
 */
async function measureStoredChains(ctx: BenchContext, o: { edge: Router; model: string; modelDir: string; agent: Dispatcher }): Promise<RoutingFigures> {
  const conversations = ctx.quick ? 2 : 6
  ctx.log(`routing: ${conversations} conversations × ${TURNS} turns one at a time, chat and stored (previous_response_id) in turn`)
  const runs = { chat: [] as RequestRecord[][], responses: [] as RequestRecord[][] }
  for (let c = 0; c < conversations; c++) {
    for (const [i, api] of (['chat', 'responses'] as const).entries()) {
      const variant = 10 + i
      const users = Array.from({ length: TURNS }, (_, t) => textPromptOfLength(o.modelDir, 64, variant * 1000 + c * TURNS + t).text)
      const [turns] = await runConversations({ router: o.edge, model: o.model, system: `${api} ${c}: ${textPromptOfLength(o.modelDir, 512, variant).text}`, users, conversations: 1, turns: TURNS, dispatcher: o.agent, api })
      runs[api].push(turns!)
    }
  }
  const warm = (api: keyof typeof runs) => median(laterTurns(runs[api]).map((t) => t.ttftMs!))
  const ratio = warm('responses') / warm('chat')
  ctx.log(`routing: stored turns 2–${TURNS} p50 TTFT ${round(warm('responses'), 1)} ms, chat ${round(warm('chat'), 1)} ms (${round(ratio, 2)}×); cached share ${round(laterTurnsCachedShare(runs.responses), 3)} stored, ${round(laterTurnsCachedShare(runs.chat), 3)} chat`)
  return {
    figures: { responses_chain_cached_share: round(laterTurnsCachedShare(runs.responses), 3), responses_chain_over_chat_warm_ttft: round(ratio, 2) },
    raw: { conversations, turns: TURNS, warm_turns_ttft_p50_ms: { chat: round(warm('chat'), 1), responses: round(warm('responses'), 1) }, chat_cached_share: round(laterTurnsCachedShare(runs.chat), 3) },
  }
}

/** Waits (bounded) until the edge's /v1/regions lists `count` nodes. */
async function waitForRegistry(edgeUrl: string, headers: Record<string, string>, count: number): Promise<void> {
  const deadline = Date.now() + 30_000
  for (;;) {
    const res = await fetch(`${edgeUrl}/v1/regions`, { headers, signal: AbortSignal.timeout(5000) }).catch(() => undefined)
    const text = res?.ok ? await res.text() : ''
    if (Array.from({ length: count }, (_, i) => `bench-${i}`).every((id) => text.includes(`"${id}"`))) return
    if (Date.now() > deadline) throw new Error(`the edge's registry did not list all ${count} nodes within 30 s`)
    await new Promise((r) => setTimeout(r, 250))
  }
}
