/**
 * Turns the engine's timing hooks into Prometheus observations, so the engine reports plain
 * numbers and never imports prom-client.
 */
import type { EngineObserver } from '../engine/types.ts'
import type { NodeMetrics } from './node-metrics.ts'

export function createMetricsObserver(metrics: NodeMetrics): EngineObserver {
  return {
    onStep({ durationMs, decodeRows, prefillRows }) {
      metrics.stepDuration.observe(durationMs / 1000)
      // A tick runs every decode row plus the sequences of its prefill chunk.
      const rows = decodeRows + prefillRows
      if (rows > 0) metrics.batchSize.observe(rows)
    },
    onScheduled(_id, queueMs) {
      metrics.requestQueueTime.observe(queueMs / 1000)
    },
    onPreempted() {
      metrics.preemptions.inc()
    },
    onAbortFreed(_id, steps) {
      metrics.abortFreeSteps.observe(steps)
    },
  }
}
