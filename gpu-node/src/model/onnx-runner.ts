import type { Worker } from 'node:worker_threads'
import type { ModelDir } from './model-dir.ts'
import { encodedVocab } from '../structured/tokenizer-info.ts'
import { CompileTrial } from '../structured/compile-trial.ts'
import { spawnTsWorker } from '../threads/ts-worker.ts'
import type { RunnerWorkerInit } from './runner-worker.ts'
import type { OutputConstraint } from '../../../shared/src/generation.ts'
import { toModelInfo, type SessionShape, type ModelInfo, type ModelRunner, type StepPlan, type StepResult } from './runner.ts'

export interface OnnxRunnerOptions {
  executionProvider: 'cpu' | 'cuda'
  intraOpThreads?: number
  /** The scheduler's KV budget, which bounds the slot caches' spare (model-step.ts). */
  kvBudgetBytes?: number
  /** Put Optimum-layout graphs on the slot KV path where exact (open-session.ts; default on). */
  slotKvEdit?: boolean
  /** Give graphs without num_logits_to_keep that input (open-session.ts; default on; off only to measure against it). */
  lastLogitsEdit?: boolean
  prefixBlockTokens?: number
  /** A new grammar must compile within this on a trial thread before the model worker compiles it (compile-trial.ts); 0: no trial. */
  compileBudgetMs?: number
}

/**
 * The main-thread side of the ONNX Runtime worker: posts each StepPlan and awaits its result
 * (a round trip costs 50–100 µs, FACTS.md). The worker is started through tsx's ESM API, since
 * Node 20 does not pass `--import` loaders on to worker threads.
 */
export class OnnxRunner implements ModelRunner {
  private nextId = 1
  private readonly pending = new Map<number, { resolve(r: unknown): void; reject(e: Error): void }>()
  private exited = false

  private constructor(
    private readonly worker: Worker,
    readonly info: ModelInfo,
    private readonly trial: CompileTrial | undefined,
  ) {
    worker.on('message', (msg: { type: string; id: number; result?: StepResult; message?: string }) => {
      const p = this.pending.get(msg.id)
      if (!p) return
      this.pending.delete(msg.id)
      if (msg.type === 'result') p.resolve(msg.result)
      else p.reject(new Error(msg.message ?? 'model step failed'))
    })
    worker.on('exit', () => {
      this.exited = true
      for (const p of this.pending.values()) p.reject(new Error('model worker exited'))
      this.pending.clear()
    })
  }

  static async start(dir: ModelDir, opts: OnnxRunnerOptions): Promise<OnnxRunner> {
    const init: RunnerWorkerInit = {
      onnxPath: dir.onnxPath,
      onnxFile: dir.onnxFile,
      config: dir.config,
      eosTokenIds: dir.eosTokenIds,
      vocab: encodedVocab(dir.tokenizerJson, dir.config.vocabSize),
      executionProvider: opts.executionProvider,
      ...(opts.intraOpThreads ? { intraOpThreads: opts.intraOpThreads } : {}),
      ...(opts.kvBudgetBytes ? { kvBudgetBytes: opts.kvBudgetBytes } : {}),
      ...(opts.slotKvEdit !== undefined ? { slotKvEdit: opts.slotKvEdit } : {}),
      ...(opts.lastLogitsEdit !== undefined ? { lastLogitsEdit: opts.lastLogitsEdit } : {}),
      ...(opts.prefixBlockTokens ? { prefixBlockTokens: opts.prefixBlockTokens } : {}),
    }
    const worker = spawnTsWorker(new URL('./runner-worker.ts', import.meta.url), init)
    const kv = await new Promise<SessionShape>((resolve, reject) => {
      worker.once('message', (msg: { type: string; io?: SessionShape; message?: string }) => {
        if (msg.type === 'ready') resolve(msg.io!)
        else reject(new Error(msg.message ?? 'model worker failed to start'))
      })
      worker.once('error', reject)
    })
    const info = toModelInfo(dir, kv)
    const trial = opts.compileBudgetMs ? new CompileTrial({ vocab: init.vocab!, eosTokenIds: dir.eosTokenIds }, opts.compileBudgetMs) : undefined
    return new OnnxRunner(worker, info, trial)
  }

  step(plan: StepPlan): Promise<StepResult> {
    return this.ask({ type: 'step', plan }) as Promise<StepResult>
  }

  /**
   * A grammar new to the worker is first compiled on a trial thread within the budget
   * (compile-trial.ts); then the worker compiles it while a step may be in flight (its thread is
   * free while ONNX Runtime runs), so the sequence's first step finds the grammar compiled.
   */
  async prepare(constraint: OutputConstraint): Promise<void> {
    await this.trial?.check(constraint)
    await this.ask({ type: 'prepare', constraint })
  }

  private ask(msg: { type: 'step'; plan: StepPlan } | { type: 'prepare'; constraint: OutputConstraint }): Promise<unknown> {
    if (this.exited) return Promise.reject(new Error('model worker exited'))
    const id = this.nextId++
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject })
      this.worker.postMessage({ ...msg, id })
    })
  }

  async close(): Promise<void> {
    await this.trial?.close()
    await this.worker.terminate()
  }
}
