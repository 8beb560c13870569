/**
 * Engine scenarios on the `small` preset: the first three in this process, through the
 * product's own Engine, scheduler, batching policies and ONNX Runtime worker runner
 * (engine-rig.ts), the fourth over HTTP against a GPU node process. One file each:
 *
 * 1. engine-throughput.ts: tokens/s of continuous batching, static batches of 8 and one at a
 *    time, in rounds.
 * 2. engine-overhead.ts: the engine's steady-state tokens/s against raw ONNX Runtime (and the
 *    bare runner), measured inside scenario 1's continuous runs.
 * 3. engine-poisson.ts: p99 TTFT of static-8 vs continuous under Poisson arrivals at 80 % of
 *    static-8's capacity, and the load sweep for the chart.
 * 4. engine-over-http.ts: idle TTFT minus the prefill step, and the node's event-loop delay under
 *    full load.
 * 5. engine-optimum-layout.ts: decode tokens/s of an Optimum-layout (concat KV) `small` edited
 *    onto the slot KV path at load, against the same weights in the slot layout.
 * 6. engine-peer.ts: TTFT, decode and 16-at-once tokens/s against transformers.js on one graph.
 */
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { round } from '../lib/stats.ts'
import { runOptimumLayout } from './engine-optimum-layout.ts'
import { runOverHttp } from './engine-over-http.ts'
import { runPeer } from './engine-peer.ts'
import { OverheadProbe } from './engine-overhead.ts'
import { runPoisson } from './engine-poisson.ts'
import { closeEngineRig, NEW_TOKENS, PROMPT_TOKENS, startEngineRig, STATIC_WAIT_MS, STREAMS, warmUp } from './engine-rig.ts'
import { runThroughput } from './engine-throughput.ts'

export interface EngineOptions {
  modelDir?: string
}

export async function runEngine(ctx: BenchContext, opts: EngineOptions = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/small'
  if (await ensureGeneratedModel(modelDir, (l) => ctx.log(l))) ctx.log(`generated ${modelDir}`)
  const ep = process.env.EXECUTION_PROVIDER === 'cuda' ? 'cuda' : 'cpu'
  const notes: string[] = []
  const raw: Record<string, unknown> = { model: modelDir, execution_provider: ep, streams: STREAMS, prompt_tokens: PROMPT_TOKENS, new_tokens: NEW_TOKENS, static_wait_ms: STATIC_WAIT_MS }

  const inProcess = await runInProcess(ctx, modelDir, ep, raw, notes)
  const optimumLayout = await runOptimumLayout(ctx, ep, raw, notes)
  const overHttp = await runOverHttp(ctx, modelDir, raw, notes)
  const peer = await runPeer(ctx, raw, notes)
  return {
    figures: { ...inProcess.figures, optimum_layout_over_slot_tokens_per_s: optimumLayout, ...overHttp, ...peer },
    raw,
    notes,
    chart: inProcess.chart,
  }
}

/** Scenarios 1–3 on one set of engines and references, loaded once and closed at the end. */
async function runInProcess(ctx: BenchContext, modelDir: string, ep: 'cpu' | 'cuda', raw: Record<string, unknown>, notes: string[]) {
  const dir = readModelDir(modelDir)
  const tokenizer = new ModelTokenizer(dir)
  ctx.log(`loading ${modelDir} into 3 engines, a bare runner and a bare ONNX Runtime session, each in its worker thread (${ep})`)
  const rig = await startEngineRig(dir, tokenizer, ep)
  const overhead = await OverheadProbe.start(ctx, rig, dir, ep)
  try {
    await warmUp(ctx, rig)
    const rounds = await runThroughput(ctx, rig, overhead, raw, notes)
    const engineOverRawOrt = overhead.report(raw, rounds)
    const poisson = await runPoisson(ctx, rig, rounds, raw, notes)
    return {
      figures: {
        continuous_over_sequential_tokens_per_s: round(rounds.med('continuous_over_sequential')),
        engine_over_raw_ort_tokens_per_s: engineOverRawOrt,
        static8_over_continuous_p99_ttft: poisson.static8OverContinuousP99,
      },
      chart: poisson.chart,
    }
  } finally {
    await closeEngineRig(rig)
    await overhead.close()
  }
}
