/**
 * A bound on what a new grammar costs the steps in flight. The model worker compiles on the
 * thread that runs the steps (xgrammar's compiled grammars cannot cross threads), so a grammar
 * that takes a second to compile holds every request's next token for that second. Before the
 * model worker compiles a constraint it has not compiled before, a trial compiles it on a thread
 * of its own, with its own xgrammar: one over the budget is refused (a 400 naming the field),
 * and one that never finishes is stopped at a hard limit, its thread replaced. The steps then
 * only ever wait for grammars known to compile within the budget.
 */
import type { Worker } from 'node:worker_threads'
import type { OutputConstraint } from '../../../shared/src/generation.ts'
import { spawnTsWorker } from '../threads/ts-worker.ts'
import type { CompileTrialInit } from './compile-trial-worker.ts'

/** Constraints known to compile within the budget, kept so a repeated one needs no trial. */
const PASSED_KEPT = 256

/** A constraint whose grammar compiles too slowly for the steps to wait on it. */
export class CompileBudgetError extends Error {
  constructor(readonly budgetMs: number) {
    super(`compiling the grammar took longer than ${budgetMs} ms`)
  }
}

export class CompileTrial {
  private worker: Promise<Worker> | undefined
  private nextId = 1
  private readonly pending = new Map<number, { resolve(ms: number): void; reject(e: Error): void }>()
  private readonly passed = new Set<string>()

  constructor(
    private readonly init: CompileTrialInit,
    /** A trial over this is refused. */
    readonly budgetMs: number,
    /** A trial still running after this is stopped (its thread terminated and replaced). */
    private readonly hardLimitMs = Math.max(4 * budgetMs, 5000),
  ) {}

  /** Resolves when `spec` compiles within the budget; rejects with CompileBudgetError when it does not, or with the engine's error. */
  async check(spec: OutputConstraint): Promise<void> {
    const key = JSON.stringify(spec)
    if (this.passed.has(key)) return
    const ms = await this.run(spec)
    if (ms > this.budgetMs) throw new CompileBudgetError(this.budgetMs)
    this.passed.add(key)
    if (this.passed.size > PASSED_KEPT) this.passed.delete(this.passed.values().next().value!)
  }

  async close(): Promise<void> {
    const worker = this.worker
    this.worker = undefined
    if (worker) await (await worker).terminate()
  }

  private async run(spec: OutputConstraint): Promise<number> {
    const worker = await (this.worker ??= this.start())
    const id = this.nextId++
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        // Stuck in the engine (a compile cannot be interrupted): the thread goes, a new one comes.
        this.pending.delete(id)
        this.worker = undefined
        void worker.terminate()
        reject(new CompileBudgetError(this.budgetMs))
      }, this.hardLimitMs)
      timer.unref()
      this.pending.set(id, {
        resolve: (ms) => (clearTimeout(timer), resolve(ms)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      })
      worker.postMessage({ id, spec })
    })
  }

  private start(): Promise<Worker> {
    const worker = spawnTsWorker(new URL('./compile-trial-worker.ts', import.meta.url), this.init)
    worker.unref()
    worker.on('message', (msg: { type: string; id?: number; ms?: number; message?: string }) => {
      const p = msg.id === undefined ? undefined : this.pending.get(msg.id)
      if (!p) return
      this.pending.delete(msg.id!)
      if (msg.type === 'result') p.resolve(msg.ms!)
      else p.reject(new Error(msg.message ?? 'the trial compile failed'))
    })
    worker.on('exit', () => {
      for (const p of this.pending.values()) p.reject(new Error('the trial compiler exited'))
      this.pending.clear()
    })
    return new Promise((resolve, reject) => {
      worker.once('message', (msg: { type: string; message?: string }) => (msg.type === 'ready' ? resolve(worker) : reject(new Error(msg.message ?? 'the trial compiler failed to start'))))
      worker.once('error', reject)
    })
  }
}
