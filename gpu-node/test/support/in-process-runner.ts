import type { ModelStep } from '../../src/model/model-step.ts'
import type { ModelInfo, ModelRunner, StepPlan } from '../../src/model/runner.ts'

/**
 * The ModelStep the worker runs, on the test's own thread, so a test can hand it a cache of its
 * own (a control's wrong positions) or rewrite the plans it gets (a control's stale block).
 */
export class InProcessRunner implements ModelRunner {
  constructor(
    readonly info: ModelInfo,
    private readonly model: ModelStep,
    private readonly rewrite: (plan: StepPlan) => StepPlan = (p) => p,
  ) {}

  step(plan: StepPlan) {
    return this.model.run(this.rewrite(plan))
  }

  async close() {}
}
