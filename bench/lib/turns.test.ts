import { describe, expect, it } from 'vitest'
import type { ModelInfo, ModelRunner, StepPlan, StepResult } from '../../gpu-node/src/model/runner.ts'
import { Turns } from './turns.ts'

/** A runner on the other side of the boundary: each step records when it ran and waits to be let go. */
function fakeRunner(name: string, log: string[]): ModelRunner & { finishStep: () => void } {
  let finish: (() => void) | undefined
  return {
    info: {} as ModelInfo,
    step: (_plan: StepPlan) =>
      new Promise<StepResult>((resolve) => {
        log.push(`${name} runs`)
        finish = () => resolve({} as StepResult)
      }),
    finishStep: () => finish?.(),
    close: async () => {},
  }
}

const plan: StepPlan = { release: [], decode: true, prefill: [] }
const flush = () => new Promise((r) => setImmediate(r))

/** Two turn-taking runners over fake runners A and B, and the log of which one ran. */
function pair() {
  const log: string[] = []
  const turns = new Turns()
  const innerA = fakeRunner('A', log)
  const innerB = fakeRunner('B', log)
  return { log, innerA, innerB, a: turns.runner(innerA), b: turns.runner(innerB) }
}

describe('turn-taking runners', () => {
  it('runs one step at a time, alternating, and keeps a measuring runner\'s turn until it asks for its next step', async () => {
    const { log, innerA, innerB, a, b } = pair()
    a.measuring = b.measuring = true
    const a1 = a.step(plan)
    const b1 = b.step(plan)
    await flush()
    expect(log).toEqual(['A runs'])
    innerA.finishStep()
    await a1
    await flush()
    // A's step is done but A keeps the turn (its engine is working on the result): B still waits.
    expect(log).toEqual(['A runs'])
    const a2 = a.step(plan)
    await flush()
    expect(log).toEqual(['A runs', 'B runs'])
    innerB.finishStep()
    await b1
    b.stopMeasuring()
    await flush()
    expect(log).toEqual(['A runs', 'B runs', 'A runs'])
    innerA.finishStep()
    await a2
    a.stopMeasuring()
    expect(a.busyMs).toBeGreaterThan(0)
    expect(b.busyMs).toBeGreaterThan(0)
  })

  it('does not hold the turn after a step when not measuring', async () => {
    const { log, innerA, innerB, a, b } = pair()
    const a1 = a.step(plan)
    const b1 = b.step(plan)
    await flush()
    expect(log).toEqual(['A runs'])
    innerA.finishStep()
    await a1
    await flush()
    expect(log).toEqual(['A runs', 'B runs'])
    innerB.finishStep()
    await b1
  })
})
