/**
 * The prefix cache's cost when it never helps (`prefix.zero_hit_throughput_ratio`):
 * tokens/s with the cache ÷ without, on prompts that share nothing.
 *
 * In process, two product engines built as the node builds them (parseNodeConfig's defaults,
 * loadModel and Engine as compose-engine.ts, its model worker wrapped to take turns), one with the default PREFIX_CACHE_MB and one with
 * PREFIX_CACHE_MB=0, each its own model worker. A run submits the same 32 requests to both in one
 * tick (distinct 128-token prompts, 64 new tokens, EOS ignored), so both schedule exactly the
 * same steps, and the two take turns at the machine, one step each (bench/lib/turns.ts); an
 * engine's time is the time it held its turns, and the run's ratio is the time without ÷ with.
 * Each engine's cache fills during the warm-up runs, so the measured runs are the steady state:
 * every prompt and generated block is saved into an evicted block.
 *
 * Why this way, measured on this 2-core shared machine:
 * - over HTTP, arrival timing changed the batches from run to run: per-run ratios 0.80–1.10;
 * - in process but one engine's run after the other's (pairs ABBA), the same run's time drifted
 *   ±10 % within seconds: with both caches off (an A/A control) pair ratios spread 0.85–1.06,
 *   and the median of 4–6 pairs moved 0.93–1.01 from one try to the next;
 * - the runs come in two rounds, each with its own two engines built in the opposite order, as
 *   the A/A control also hinted that the engine built first ran slower (10 of 12 pairs).
 */
import { performance } from 'node:perf_hooks'
import { Engine } from '../../gpu-node/src/engine/engine.ts'
import { GREEDY } from '../../gpu-node/src/engine/types.ts'
import type { ModelInfo } from '../../gpu-node/src/model/runner.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round } from '../lib/stats.ts'
import { Turns, type TurnRunner } from '../lib/turns.ts'
import { loadNodeModel } from './engine-rig.ts'

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

interface TurnEngine {
  engine: Engine
  runner: TurnRunner
  info: ModelInfo
}

async function engineFor(modelDir: string, env: Record<string, string>, turns: Turns): Promise<TurnEngine> {
  // As compose-engine.ts builds the node's engine, with its model worker taking turns.
  const { model, limits } = await loadNodeModel(modelDir, env)
  const runner = turns.runner(model.runner)
  const engine = new Engine({ runner, modelKey: model.encoder.modelId, decoder: model.tokenizer, limits })
  return { engine, runner, info: model.runner.info }
}

/** Distinct prompts: every one starts with its own tokens, so no block is shared across runs or requests. */
function prompt(run: number, i: number, vocab: number, avoid: readonly number[]): number[] {
  return Array.from({ length: PROMPT_TOKENS }, (_, j) => {
    let t = 100 + ((run * 1_000_003 + i * 7919 + j * 104_729) % (vocab - 200))
    while (avoid.includes(t)) t++
    return t
  })
}

/** One run of the same requests on every engine at once: each engine's tokens/s over the time it held its turns, and tokens served from the cache. */
async function runTogether(engines: readonly TurnEngine[], runIndex: number, measure: boolean): Promise<Array<{ tokPerS: number; cached: number }>> {
  const { vocabSize, eosTokenIds } = engines[0]!.info
  return Promise.all(
    engines.map(async ({ engine, runner }) => {
      const busy = runner.busyMs
      runner.measuring = measure
      let left = STREAMS
      let tokens = 0
      let cached = 0
      await Promise.all(
        Array.from({ length: STREAMS }, (_, i) =>
          new Promise<void>((resolve, reject) => {
            const r = engine.submit({ id: `zero-${runIndex}-${i}`, promptTokens: prompt(runIndex, i, vocabSize, eosTokenIds), maxTokens: NEW_TOKENS, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }, (ev) => {
              if (ev.type !== 'finish') return
              tokens += ev.usage.completionTokens
              cached += ev.usage.cachedTokens ?? 0
              // The engine's last finish: its run is over, so is its share of the turns.
              if (--left === 0) runner.stopMeasuring()
              resolve()
            })
            if (!r.ok) reject(new Error(`zero-hit request refused: ${r.code}`))
          }),
        ),
      )
      return { tokPerS: (tokens * 1000) / (runner.busyMs - busy), cached }
    }),
  )
}

export async function measureZeroHit(ctx: BenchContext, modelDir: string, runsPerRound: number): Promise<ZeroHitResult> {
  const withTokS: number[] = []
  const withoutTokS: number[] = []
  let cachedTokens = 0
  let evictions = 0
  let index = 0
  for (const onFirst of [true, false]) {
    const turns = new Turns()
    // Built one after the other: loading is not what is measured.
    const first = await engineFor(modelDir, onFirst ? {} : { PREFIX_CACHE_MB: '0' }, turns)
    const second = await engineFor(modelDir, onFirst ? { PREFIX_CACHE_MB: '0' } : {}, turns)
    const [on, off] = onFirst ? [first, second] : [second, first]
    try {
      const cache = () => on.engine.stats().prefixCache
      const runBytes = STREAMS * (PROMPT_TOKENS + NEW_TOKENS) * on.info.kvBytesPerToken
      const capacity = cache()?.capacityBytes ?? 0
      const warmRuns = Math.max(1, Math.ceil(capacity / runBytes))
      ctx.log(`zero hits (in process, turn by turn), the cache's engine built ${onFirst ? 'first' : 'second'}: ${STREAMS} distinct ${PROMPT_TOKENS}-token prompts at once, ${NEW_TOKENS} new tokens; ${warmRuns} warm-up run(s) fill the cache (${round(capacity / 2 ** 20, 0)} MiB), then ${runsPerRound} measured`)
      for (let w = 0; w < warmRuns; w++) await runTogether([on, off], index++, false)
      for (let r = 0; r < runsPerRound; r++) {
        // The engine given its requests first takes the first turn: which one alternates.
        const [w, wo] = r % 2 === 0 ? await runTogether([on, off], index++, true) : (await runTogether([off, on], index++, true)).reverse()
        withTokS.push(w!.tokPerS)
        withoutTokS.push(wo!.tokPerS)
        cachedTokens += w!.cached
      }
      evictions += cache()?.evictions ?? 0
    } finally {
      await Promise.all([on.engine.close(), off.engine.close()])
    }
  }
  const pairRatios = withTokS.map((w, i) => w / withoutTokS[i]!)
  const result = { ratio: median(pairRatios), pairRatios, withTokS, withoutTokS, cachedTokens, evictions }
  ctx.log(`zero hits: median run ratio ${round(result.ratio, 3)} (runs ${pairRatios.map((r) => round(r, 3)).join(', ')}; the first ${runsPerRound} with the cache's engine built first); ${round(median(withTokS), 1)} tok/s with the cache, ${round(median(withoutTokS), 1)} without, each over its own turns; cached tokens ${cachedTokens}, evictions ${evictions}`)
  return result
}
