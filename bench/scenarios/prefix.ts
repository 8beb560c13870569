/**
 * Prefix caching (issue 16), on the engine model through a GPU node's HTTP API (OpenAI chat,
 * streamed, greedy, ignore_eos), two nodes side by side: one with the prefix cache
 * (PREFIX_CACHE_MB default) and one without (PREFIX_CACHE_MB=0), used one at a time.
 *
 * - Multi-turn chat: C conversations at once, T turns each; every conversation starts with the
 *   same system prompt of 512 tokens, each turn adds a ~64-token user message, 32 tokens are
 *   generated and sent back as the assistant's turn. The same requests go to both nodes (greedy
 *   and exact, so the answers — and so the next turns — are the same).
 *   `warm_turn_ttft_speedup` = p50 TTFT of turns 2..T without the cache ÷ with it.
 * - Zero hits (prefix-zero-hit.ts): 32 requests whose prompts share nothing, in process on two
 *   engines built as the node builds them; `zero_hit_throughput_ratio` = tokens/s with the cache
 *   ÷ without (the cache's cost when it never helps: chain hashing and block saves).
 * - Routing through the edge (prefix-routing.ts): the cached share with and without cache-affine
 *   routing over two nodes, and how a hot prompt spreads.
 */
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { benchAgent, type RequestRecord } from '../load/client.ts'
import { runConversations } from './prefix-chat.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { startGpuNode, type GpuNode } from '../lib/services.ts'
import { median, percentile, round } from '../lib/stats.ts'
import { measureAffinity } from './prefix-routing.ts'
import { measureZeroHit } from './prefix-zero-hit.ts'

export async function runPrefix(ctx: BenchContext, opts: { modelDir?: string } = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/small'
  await ensureGeneratedModel(modelDir, (l) => ctx.log(l))
  const shape = ctx.quick ? { conversations: 4, turns: 3, repeats: 1 } : { conversations: 16, turns: 6, repeats: 2 }
  ctx.log(`starting two GPU nodes (${modelDir}): prefix cache on, and PREFIX_CACHE_MB=0`)
  const on = await startGpuNode({ modelDir })
  const off = await startGpuNode({ modelDir, env: { PREFIX_CACHE_MB: '0' } })
  const agent = benchAgent()
  try {
    const system = textPromptOfLength(modelDir, 512).text
    const users = Array.from({ length: shape.conversations * shape.turns }, (_, i) => textPromptOfLength(modelDir, 64, 1 + i).text)
    const chat = (node: GpuNode) => runConversations({ origin: node.url, model: node.model, system, users, conversations: shape.conversations, turns: shape.turns, dispatcher: agent })
    ctx.log(`multi-turn: ${shape.conversations} conversations × ${shape.turns} turns, 512-token shared system prompt, without the cache`)
    const cold = await chat(off)
    ctx.log('multi-turn: the same, with the cache')
    const warm = await chat(on)
    const later = (runs: RequestRecord[][]) => runs.flatMap((turns) => turns.slice(1).map((r) => r.ttftMs!))
    const first = (runs: RequestRecord[][]) => runs.map((turns) => turns[0]!.ttftMs!)
    const textsEqual = cold.every((turns, c) => turns.every((r, t) => r.text === warm[c]![t]!.text))
    const speedup = median(later(cold)) / median(later(warm))
    ctx.log(`turns 2–${shape.turns} p50 TTFT: ${round(median(later(cold)), 1)} ms without, ${round(median(later(warm)), 1)} ms with (${round(speedup, 2)}×); answers equal: ${textsEqual}`)

    const cachedShare = (runs: RequestRecord[][]) => runs.flatMap((turns) => turns.slice(1)).reduce((n, r) => n + (r.cachedTokens ?? 0), 0)
    await Promise.all([on.stop(), off.stop()])
    const zero = await measureZeroHit(ctx, modelDir, ctx.quick ? 1 : 4)
    const routing = await measureAffinity(ctx, modelDir, shape)
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
