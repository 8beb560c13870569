/**
 * When waiting sequences may start. Continuous batching (the product) admits whenever the
 * budget allows; the benchmark's static-batching baseline (DESIGN.md §9) is another policy
 * (gpu-node/test/support/static-batching.ts).
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
