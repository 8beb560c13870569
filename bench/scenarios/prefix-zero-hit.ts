/**
 * The prefix cache's cost when it never helps (issue 16, `prefix.zero_hit_throughput_ratio`):
 * tokens/s with the cache ÷ without, on prompts that share nothing.
 *
 * In process, two product engines built as the node builds them (parseNodeConfig's defaults,
 * composeEngine), one with the default PREFIX_CACHE_MB and one with PREFIX_CACHE_MB=0, each its
 * own model worker. A run submits all 32 requests in one tick (distinct 128-token prompts, 64
 * new tokens, EOS ignored), so both engines schedule exactly the same steps: measured over HTTP,
 * where arrival order and timing change the batches from run to run, the per-run ratios spread
 * over ±15 % (0.80–1.10 on a quiet machine), which hides a cost of a few per cent.
 * Runs alternate in pairs, ABBA; the figure is the median of the per-pair ratios (adjacent runs
 * share the machine's drift). Each engine's cache fills during the warm-up runs, so the pairs
 * measure the steady state: every prompt and generated block is saved into an evicted block.
 */
import { performance } from 'node:perf_hooks'
import { composeEngine, type ComposedEngine } from '../../gpu-node/src/compose-engine.ts'
import { parseNodeConfig } from '../../gpu-node/src/config.ts'
import { GREEDY } from '../../gpu-node/src/engine/types.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round } from '../lib/stats.ts'

const STREAMS = 32
const PROMPT_TOKENS = 128
const NEW_TOKENS = 64

export interface ZeroHitResult {
  ratio: number
  pairRatios: number[]
  withTokS: number[]
  withoutTokS: number[]
  cachedTokens: number
  evictions: number
}

async function engineFor(modelDir: string, env: Record<string, string>): Promise<ComposedEngine> {
  const config = parseNodeConfig({ MODEL_DIR: modelDir, ALLOW_UNSIGNED: '1', ...env })
  return composeEngine({ modelDir: config.modelDir, executionProvider: config.executionProvider, intraOpThreads: config.intraOpThreads, slotKvEdit: config.slotKvEdit, limits: config.limits })
}

/** Distinct prompts: every one starts with its own tokens, so no block is shared across runs or requests. */
function prompt(run: number, i: number, vocab: number, avoid: readonly number[]): number[] {
  return Array.from({ length: PROMPT_TOKENS }, (_, j) => {
    let t = 100 + ((run * 1_000_003 + i * 7919 + j * 104_729) % (vocab - 200))
    while (avoid.includes(t)) t++
    return t
  })
}

/** One run: all requests submitted at once; tokens/s over the run, and tokens served from the cache. */
async function run(e: ComposedEngine, runIndex: number, vocab: number, avoid: readonly number[]): Promise<{ tokPerS: number; cached: number }> {
  const started = performance.now()
  const done = Array.from({ length: STREAMS }, (_, i) =>
    new Promise<{ tokens: number; cached: number }>((resolve, reject) => {
      const r = e.engine.submit({ id: `zero-${runIndex}-${i}`, promptTokens: prompt(runIndex, i, vocab, avoid), maxTokens: NEW_TOKENS, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }, (ev) => {
        if (ev.type === 'finish') resolve({ tokens: ev.usage.completionTokens, cached: ev.usage.cachedTokens ?? 0 })
      })
      if (!r.ok) reject(new Error(`zero-hit request refused: ${r.code}`))
    }),
  )
  const results = await Promise.all(done)
  const tokens = results.reduce((n, r) => n + r.tokens, 0)
  return { tokPerS: (tokens * 1000) / (performance.now() - started), cached: results.reduce((n, r) => n + r.cached, 0) }
}

export async function measureZeroHit(ctx: BenchContext, modelDir: string, pairs: number): Promise<ZeroHitResult> {
  const on = await engineFor(modelDir, {})
  const off = await engineFor(modelDir, { PREFIX_CACHE_MB: '0' })
  try {
    const vocab = on.info.vocabSize
    const avoid = on.info.eosTokenIds
    const cache = () => on.engine.stats().prefixCache
    const runBytes = STREAMS * (PROMPT_TOKENS + NEW_TOKENS) * on.info.kvBytesPerToken
    const capacity = cache()?.capacityBytes ?? 0
    const warmRuns = Math.max(1, Math.ceil(capacity / runBytes))
    ctx.log(`zero hits (in process): ${STREAMS} distinct ${PROMPT_TOKENS}-token prompts at once, ${NEW_TOKENS} new tokens; ${warmRuns} warm-up run(s) fill the cache (${round(capacity / 2 ** 20, 0)} MiB), then ${pairs} pairs ABBA`)
    let index = 0
    for (let w = 0; w < warmRuns; w++, index++) {
      await run(on, index, vocab, avoid)
      await run(off, index, vocab, avoid)
    }
    const withTokS: number[] = []
    const withoutTokS: number[] = []
    let cachedTokens = 0
    for (let p = 0; p < pairs; p++) {
      const first = p % 2 === 0 ? on : off
      const second = first === on ? off : on
      const a = await run(first, index, vocab, avoid)
      const b = await run(second, index++, vocab, avoid)
      const [w, wo] = first === on ? [a, b] : [b, a]
      withTokS.push(w.tokPerS)
      withoutTokS.push(wo.tokPerS)
      cachedTokens += w.cached
    }
    const pairRatios = withTokS.map((w, i) => w / withoutTokS[i]!)
    const result = { ratio: median(pairRatios), pairRatios, withTokS, withoutTokS, cachedTokens, evictions: cache()?.evictions ?? 0 }
    ctx.log(`zero hits: median pair ratio ${round(result.ratio, 3)} (pairs ${pairRatios.map((r) => round(r, 3)).join(', ')}); ${round(median(withTokS), 1)} tok/s with the cache, ${round(median(withoutTokS), 1)} without; cached tokens ${cachedTokens}, evictions ${result.evictions}`)
    return result
  } finally {
    await Promise.all([on.engine.close(), off.engine.close()])
  }
}
