import { performance } from 'node:perf_hooks'
import type { ModelRunner, StepPlan, StepResult } from '../../gpu-node/src/model/runner.ts'
import type { OutputConstraint } from '../../shared/src/generation.ts'

/**
 * Model runners that take turns at the machine, one engine step each, so that two engines
 * compared on this shared machine run through the same moments: measured run after run, the
 * time of one same run drifts by ±10 % within seconds, far more than the few per cent an A/B
 * comparison looks for; taking turns every step (~70 ms) puts that drift on both sides alike.
 *
 * A runner whose engine is `measuring` keeps its turn after its step returns, through the
 * engine's own work on the result and its next schedule, and gives it up when that engine asks
 * for its next step: so `busyMs` is all the time the engine held the machine, model and main
 * thread alike, while the other engine waited. Not measuring, a runner holds the turn only for
 * its step (an engine's final release step, say), and never makes the other wait longer.
 */
export class Turns {
  private holder: TurnRunner | undefined
  private readonly waiting: Array<{ runner: TurnRunner; go: () => void }> = []

  runner(inner: ModelRunner): TurnRunner {
    return new TurnRunner(inner, this)
  }

  acquire(r: TurnRunner): Promise<void> {
    if (!this.holder) {
      this.hand(r)
      return Promise.resolve()
    }
    return new Promise((go) => this.waiting.push({ runner: r, go }))
  }

  release(r: TurnRunner): void {
    if (this.holder !== r) return
    r.busyMs += performance.now() - r.since
    this.holder = undefined
    const next = this.waiting.shift()
    if (next) {
      this.hand(next.runner)
      next.go()
    }
  }

  private hand(r: TurnRunner): void {
    this.holder = r
    r.since = performance.now()
  }
}

export class TurnRunner implements ModelRunner {
  /** Time this runner held the turn, summed. */
  busyMs = 0
  /** When it last got the turn. */
  since = 0
  /** Keep the turn between steps: the engine's work on each result is charged to it. */
  measuring = false

  constructor(
    private readonly inner: ModelRunner,
    private readonly turns: Turns,
  ) {}

  get info() {
    return this.inner.info
  }

  /** Compiling a grammar is not a step: it takes no turn. */
  prepare(constraint: OutputConstraint): Promise<void> {
    if (!this.inner.prepare) return Promise.reject(new Error('structured output is not available on this model runner'))
    return this.inner.prepare(constraint)
  }

  async step(plan: StepPlan): Promise<StepResult> {
    this.turns.release(this)
    await this.turns.acquire(this)
    try {
      return await this.inner.step(plan)
    } finally {
      if (!this.measuring) this.turns.release(this)
    }
  }

  /** Stops measuring and gives up the turn now (its engine has nothing left to do). */
  stopMeasuring(): void {
    this.measuring = false
    this.turns.release(this)
  }

  close(): Promise<void> {
    return this.inner.close()
  }
}
