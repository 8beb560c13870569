/**
 * When waiting sequences may start. Continuous batching (the product) admits whenever the
 * budget allows; static batching exists as the benchmark's baseline (DESIGN.md §9): a batch
 * starts when `size` are waiting or the oldest has waited `maxWaitMs`, and nothing joins until
 * every member has finished.
 */
export interface BatchingPolicy {
  /** How many more sequences may start prefill now (Infinity: as many as fit). */
  admissible(view: { active: number; waiting: number; oldestArrivalMs: number | undefined; nowMs: number }): number
  /** Called once per sequence admitted. */
  admitted(): void
}

export const continuousBatching = (): BatchingPolicy => ({
  admissible: () => Infinity,
  admitted: () => {},
})

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
