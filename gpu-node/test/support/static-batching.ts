import type { BatchingPolicy } from '../../src/engine/batching-policy.ts'

/**
 * The benchmark's baseline (DESIGN.md §9), and the scheduler test's: a batch starts when `size`
 * are waiting or the oldest has waited `maxWaitMs`, and nothing joins until every member has
 * finished.
 */
export function staticBatching(size: number, maxWaitMs: number): BatchingPolicy {
  /** Members of the current batch still to be admitted. */
  let slots = 0
  return {
    admissible({ active, waiting, oldestArrivalMs, nowMs }) {
      if (slots === 0 && active === 0 && waiting > 0) {
        const waitedMs = oldestArrivalMs === undefined ? 0 : nowMs - oldestArrivalMs
        if (waiting >= size || waitedMs >= maxWaitMs) slots = Math.min(size, waiting)
      }
      return slots
    },
    admitted() {
      slots = Math.max(0, slots - 1)
    },
  }
}
