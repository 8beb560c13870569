/**
 * Prefix caching, on the engine model through a GPU node's HTTP API (OpenAI chat,
 * streamed, greedy, ignore_eos), two nodes side by side: one with the prefix cache
 * (PREFIX_CACHE_MB default) and one without (PREFIX_CACHE_MB=0), used one at a time.
 *
 * - Multi-turn chat: C conversations, one at a time, T turns each; every conversation starts
 *   with the same system prompt of 512 tokens, each turn adds a ~64-token user message, 32
 *   tokens are generated and sent back as the assistant's turn. Each conversation goes to the
 *   node without the cache, then the same to the node with it (greedy and exact, so the answers
 *   — and so the next turns — are the same), so drift over the run falls on both alike.
 *   `warm_turn_ttft_speedup` = p50 TTFT of turns 2..T without the cache ÷ with it: what the
 *   cache saves a conversation's next turn, nothing else. With conversations at once, as this
 *   measured before, a turn's TTFT is mostly the other conversations' prefills queued ahead of
 *   it, and the ratio measures the queue: 1.3–1.4 with 4 at once (the quick run), 16 with 16 (the
 *   full one), against ≈ 7 for one conversation at a time. A quick run has fewer conversations
 *   in the same regime.
 * - Zero hits (prefix-zero-hit.ts): 32 requests whose prompts share nothing, in process on two
 *   engines built as the node builds them; `zero_hit_throughput_ratio` = tokens/s with the cache
 *   ÷ without (the cache's cost when it never helps: chain hashing and block saves).
 * - Routing through the edge (prefix-routing.ts): the cached share with and without cache-affine
 *   routing over two nodes, and how a hot prompt spreads.
 */
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { oneOrigin } from '../lib/baseline-routers.ts'
import { benchAgent, type RequestRecord } from '../load/client.ts'
import { laterTurns, runConversations } from './prefix-chat.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { startGpuNode, type GpuNode } from '../lib/services.ts'
import { median, percentile, round } from '../lib/stats.ts'
import { measureAffinity } from './prefix-routing.ts'
import { measureZeroHit } from './prefix-zero-hit.ts'

export async function runPrefix(ctx: BenchContext, opts: { modelDir?: string } = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/small'
  await ensureGeneratedModel(modelDir, (l) => ctx.log(l))
  // The same regime in both runs (one conversation at a time, 6 turns); a quick run has fewer samples.
  const shape = { conversations: ctx.quick ? 2 : 8, turns: 6 }
  ctx.log(`starting two GPU nodes (${modelDir}): prefix cache on, and PREFIX_CACHE_MB=0`)
  const on = await startGpuNode({ modelDir })
  const off = await startGpuNode({ modelDir, env: { PREFIX_CACHE_MB: '0' } })
  const agent = benchAgent()
  try {
    const system = textPromptOfLength(modelDir, 512).text
    const users = Array.from({ length: shape.conversations * shape.turns }, (_, i) => textPromptOfLength(modelDir, 64, 1 + i).text)
    const converse = async (node: GpuNode, c: number) => (await runConversations({ router: oneOrigin('node', node.url), model: node.model, system, users: users.slice(c * shape.turns, (c + 1) * shape.turns), conversations: 1, turns: shape.turns, dispatcher: agent }))[0]!
    ctx.log(`multi-turn: ${shape.conversations} conversations × ${shape.turns} turns one at a time, 512-token shared system prompt, each without the cache then with it`)
    const cold: RequestRecord[][] = []
    const warm: RequestRecord[][] = []
    for (let c = 0; c < shape.conversations; c++) {
      cold.push(await converse(off, c))
      warm.push(await converse(on, c))
    }
    const later = (runs: RequestRecord[][]) => laterTurns(runs).map((r) => r.ttftMs!)
    const first = (runs: RequestRecord[][]) => runs.map((turns) => turns[0]!.ttftMs!)
    const textsEqual = cold.every((turns, c) => turns.every((r, t) => r.text === warm[c]![t]!.text))
    const speedup = median(later(cold)) / median(later(warm))
    ctx.log(`turns 2–${shape.turns} p50 TTFT: ${round(median(later(cold)), 1)} ms without, ${round(median(later(warm)), 1)} ms with (${round(speedup, 2)}×); answers equal: ${textsEqual}`)

    const cachedShare = (runs: RequestRecord[][]) => laterTurns(runs).reduce((n, r) => n + (r.cachedTokens ?? 0), 0)
    await Promise.all([on.stop(), off.stop()])
    const zero = await measureZeroHit(ctx, modelDir, ctx.quick ? 1 : 4)
    const routing = await measureAffinity(ctx, modelDir)
    return {
      figures: { warm_turn_ttft_speedup: round(speedup, 2), zero_hit_throughput_ratio: round(zero.ratio, 3), ...routing.figures },
      raw: {
        ...routing.raw,
        model: modelDir,
        conversations: shape.conversations,
        turns: shape.turns,
        answers_equal_with_and_without_cache: textsEqual,
        warm_turns_ttft_ms: { without_p50: round(median(later(cold)), 1), with_p50: round(median(later(warm)), 1), without_p90: round(percentile(later(cold), 90), 1), with_p90: round(percentile(later(warm), 90), 1) },
        first_turn_ttft_ms: { without_p50: round(median(first(cold)), 1), with_p50: round(median(first(warm)), 1) },
        warm_turns_cached_tokens: cachedShare(warm),
        zero_hit_pair_ratios: zero.pairRatios.map((x) => round(x, 3)),
        zero_hit_tok_s: { with: zero.withTokS.map((x) => round(x, 1)), without: zero.withoutTokS.map((x) => round(x, 1)) },
        zero_hit_cached_tokens: zero.cachedTokens,
        zero_hit_evictions: zero.evictions,
      },
      notes: textsEqual ? [] : ['the answers with and without the cache differed: the speedup compares different requests'],
    }
  } finally {
    await agent.close()
    await Promise.all([on.stop(), off.stop()])
  }
}
