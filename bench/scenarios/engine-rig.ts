/**
 * What every in-process engine scenario runs on: the workload (32 streams × 32-token prompts ×
 * 96 new tokens, EOS ignored), one product Engine per batching mode with its runner timed step by
 * step, and the submission of one request as a job whose timings are written down.
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { continuousBatching, type BatchingPolicy } from '../../gpu-node/src/engine/batching-policy.ts'
import { staticBatching } from '../../gpu-node/test/support/static-batching.ts'
import { Engine } from '../../gpu-node/src/engine/engine.ts'
import { GREEDY, type EngineRequest } from '../../gpu-node/src/engine/types.ts'
import type { ModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { parseNodeConfig } from '../../gpu-node/src/config.ts'
import type { EngineLimits } from '../../gpu-node/src/engine/types.ts'
import { loadModel, type LoadedModel } from '../../gpu-node/src/model/load-model.ts'
import { OnnxRunner } from '../../gpu-node/src/model/onnx-runner.ts'
import type { ModelRunner, StepPlan, StepResult } from '../../gpu-node/src/model/runner.ts'
import type { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import type { OutputConstraint } from '../../shared/src/generation.ts'
import type { BenchContext } from '../lib/report-types.ts'

export const STREAMS = 32
export const PROMPT_TOKENS = 32
export const NEW_TOKENS = 96
const STATIC_SIZE = 8
/** A static batch also starts when its oldest member has waited this long (a common batcher timeout). */
export const STATIC_WAIT_MS = 50
const KV_BUDGET_MB = 512
const PREFILL_CHUNK = 128

export type Mode = 'continuous' | 'static8' | 'sequential'
export const MODES: Mode[] = ['continuous', 'static8', 'sequential']

export interface StepRecord {
  callAt: number
  returnAt: number
  decodeMs: number
  prefillMs: number
  decodeRows: number
  prefillParts: number
  kvTokens: number
}

/** The product's runner, with each step's timing written down (costs two performance.now()). */
export class TimedRunner implements ModelRunner {
  steps: StepRecord[] = []
  constructor(private readonly inner: ModelRunner) {}
  get info() {
    return this.inner.info
  }
  prepare(constraint: OutputConstraint): Promise<void> {
    // As the engine answers for a runner without structured output.
    if (!this.inner.prepare) return Promise.reject(new Error('structured output is not available on this model runner'))
    return this.inner.prepare(constraint)
  }
  async step(plan: StepPlan): Promise<StepResult> {
    const callAt = performance.now()
    const r = await this.inner.step(plan)
    const returnAt = performance.now()
    this.steps.push({ callAt, returnAt, decodeMs: r.decodeMs, prefillMs: r.prefillMs, decodeRows: r.decoded.seqIds.length, prefillParts: plan.prefill.length, kvTokens: r.kvTokens })
    return r
  }
  close() {
    return this.inner.close()
  }
}

export interface BenchEngine {
  mode: Mode
  engine: Engine
  timed: TimedRunner
}

/** The three engines under test, one per mode, and the model's vocabulary facts the prompts need. */
export interface EngineRig {
  engines: Record<Mode, BenchEngine>
  vocab: number
  eos: number[]
}

export interface JobResult {
  submittedAt: number
  firstTextAt?: number
  finishedAt?: number
  tokens: number
  reason?: string
  rejected?: boolean
  /** Prompt tokens served from the prefix cache (the finish's usage). */
  cachedTokens?: number
  /** The answer's text, when asked for (submitRequest's keepText). */
  text?: string
}

let nextJob = 1

export function promptFor(i: number, vocab: number, eos: number[]): number[] {
  return Array.from({ length: PROMPT_TOKENS }, (_, j) => {
    let t = 100 + ((i * 7919 + j * 104729) % (vocab - 200))
    while (eos.includes(t)) t++
    return t
  })
}

/** Submits one request; resolves at its finish. `tokenTimes` collects one timestamp per generated token. */
export function submitJob(b: BenchEngine, prompt: number[], maxTokens: number, signal?: AbortSignal, tokenTimes?: number[]): Promise<JobResult> {
  return submitRequest(b.engine, { id: `bench-${nextJob++}`, promptTokens: prompt, maxTokens, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }, { signal, tokenTimes })
}

/**
 * Submits any engine request (a constraint, `after`, a cache salt…); resolves at its finish.
 * `tokenTimes` collects one timestamp per generated token; `keepText` keeps the answer's text.
 */
export function submitRequest(engine: Engine, req: EngineRequest, opts: { signal?: AbortSignal; tokenTimes?: number[]; keepText?: boolean } = {}): Promise<JobResult> {
  const { signal, tokenTimes } = opts
  const id = req.id
  const res: JobResult = { submittedAt: performance.now(), tokens: 0 }
  if (opts.keepText) res.text = ''
  return new Promise((resolve) => {
    const onAbort = () => engine.abort(id)
    const r = engine.submit(req, (ev) => {
      const t = performance.now()
      if (ev.type === 'text') {
        res.firstTextAt ??= t
        if (tokenTimes) for (let k = res.tokens; k < ev.completionTokens; k++) tokenTimes.push(t)
        res.tokens = ev.completionTokens
        if (res.text !== undefined) res.text += ev.text
        return
      }
      res.finishedAt = t
      res.reason = ev.reason
      if (tokenTimes) for (let k = res.tokens; k < ev.usage.completionTokens; k++) tokenTimes.push(t)
      res.tokens = ev.usage.completionTokens
      res.cachedTokens = ev.usage.cachedTokens
      signal?.removeEventListener('abort', onAbort)
      resolve(res)
    })
    if (!r.ok) {
      res.rejected = true
      res.finishedAt = performance.now()
      resolve(res)
      return
    }
    if (signal?.aborted) onAbort()
    else signal?.addEventListener('abort', onAbort, { once: true })
  })
}

async function makeEngine(dir: ModelDir, tokenizer: ModelTokenizer, ep: 'cpu' | 'cuda', mode: Mode): Promise<BenchEngine> {
  const kvBudgetBytes = KV_BUDGET_MB * 1024 * 1024
  const runner = await OnnxRunner.start(dir, { executionProvider: ep, kvBudgetBytes })
  const timed = new TimedRunner(runner)
  const policy: BatchingPolicy = mode === 'static8' ? staticBatching(STATIC_SIZE, STATIC_WAIT_MS) : continuousBatching()
  // As composeEngine (gpu-node/src/compose-engine.ts) builds it, with the runner wrapped for timing.
  const engine = new Engine({
    runner: timed,
    decoder: tokenizer,
    limits: { maxBatch: mode === 'sequential' ? 1 : STREAMS, maxQueue: 4096, kvBudgetBytes, prefillChunkTokens: PREFILL_CHUNK },
    policy,
  })
  return { mode, engine, timed }
}

/** One engine per mode, each with its runner in its own worker thread, started in MODES order. */
export async function startEngineRig(dir: ModelDir, tokenizer: ModelTokenizer, ep: 'cpu' | 'cuda'): Promise<EngineRig> {
  const engines = {} as Record<Mode, BenchEngine>
  for (const m of MODES) engines[m] = await makeEngine(dir, tokenizer, ep, m)
  return { engines, vocab: dir.config.vocabSize, eos: dir.eosTokenIds }
}

/** Warm-up: one short batch per engine (first runs allocate arenas). */
export async function warmUp(ctx: BenchContext, rig: EngineRig): Promise<void> {
  ctx.log('warm-up')
  for (const m of MODES) await Promise.all(Array.from({ length: m === 'sequential' ? 1 : 4 }, (_, i) => submitJob(rig.engines[m], promptFor(i, rig.vocab, rig.eos), 4)))
  await sleep(50)
}

export async function closeEngineRig(rig: EngineRig): Promise<void> {
  for (const m of MODES) await rig.engines[m].engine.close().catch(() => {})
}

export function rotate<T>(xs: readonly T[], by: number): T[] {
  const k = by % xs.length
  return [...xs.slice(k), ...xs.slice(0, k)]
}

/**
 * The model side of a node on `modelDir` with its default config (`env` over it), loaded as
 * compose-engine.ts loads it, and the engine limits the node would run it with: a bench wraps
 * the runner (timing, turns) before building the engine.
 */
export async function loadNodeModel(modelDir: string, env: Record<string, string> = {}): Promise<{ model: LoadedModel; limits: EngineLimits }> {
  const config = parseNodeConfig({ MODEL_DIR: modelDir, ALLOW_UNSIGNED: '1', ...env })
  const { limits } = config
  const model = await loadModel({
    modelDir: config.modelDir,
    executionProvider: config.executionProvider,
    intraOpThreads: config.intraOpThreads,
    slotKvEdit: config.slotKvEdit,
    kvBudgetBytes: limits.kvBudgetBytes,
    ...(limits.prefixBlockTokens ? { prefixBlockTokens: limits.prefixBlockTokens } : {}),
  })
  return { model, limits }
}
