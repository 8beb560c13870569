import { describe, expect, it } from 'vitest'
import type { StepPlan, StepResult } from '../model/runner.ts'
import type { Sequence } from './sequence.ts'
import { StepMetrics } from './step-metrics.ts'
import { GREEDY } from './types.ts'

/** A decode step that generated `tokens` tokens. */
const decoded = (tokens: number): StepResult => ({ decoded: { seqIds: Array.from({ length: tokens }, (_, i) => i), tokens: Array(tokens).fill(7) }, joined: { seqIds: [], tokens: [] }, kvRows: tokens, kvTokens: tokens, decodeMs: 1, prefillMs: 0 })

describe('StepMetrics token rates', () => {
  it('estimates waits by the last second when the node slowed down, and reports the 5 s rate', () => {
    let t = 0
    const m = new StepMetrics(() => t, undefined)
    const plan = { release: [], decode: true, prefill: [] }
    // 4 s at 1000 tokens/s, then 1 s at 100 tokens/s (the machine's other work grew).
    for (; t < 4000; t += 100) m.stepDone(plan, decoded(100), 0)
    for (; t < 5000; t += 100) m.stepDone(plan, decoded(10), 0)
    expect(m.tokPerSec()).toBeGreaterThan(700)
    expect(m.waitTokPerSec()).toBeCloseTo(100, -1)
    // Faster again: the 5 s rate, the lower of the two, is the estimate's.
    for (const end = t + 1000; t < end; t += 100) m.stepDone(plan, decoded(100), 0)
    expect(m.waitTokPerSec()).toBe(m.tokPerSec())
  })
})

describe('StepMetrics abort accounting', () => {
  it("reports an aborted request's steps when its row is released, or taken over by another request", () => {
    const freed: Array<[string, number]> = []
    const m = new StepMetrics(() => 0, { onAbortFreed: (id, steps) => freed.push([id, steps]) })
    const running = (seqId: number) => ({ seqId, state: 'running' }) as Sequence
    const step = (plan: StepPlan) => m.stepDone(plan, decoded(1), m.stepStarted())
    for (const [id, seqId] of [['released', 1], ['taken', 2]] as const) {
      m.abortRequested(id)
      m.abortApplied(id, running(seqId))
    }
    step({ release: [1], decode: true, prefill: [] })
    expect(freed).toEqual([['released', 1]])
    step({ release: [], decode: true, prefill: [], takeover: [{ from: 2, seqId: 3, keep: 4, tokens: [9], start: { sampling: GREEDY, promptLen: 5, banEos: false, tokens: [1, 2, 3, 4, 9] } }] })
    expect(freed).toEqual([['released', 1], ['taken', 2]])
  })
})
