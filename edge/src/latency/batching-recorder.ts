/**
 * The Node entry's latency recorder: samples are counted in memory (alike samples — same
 * minute, tenant, edge, region, outcome and histogram buckets — under one key) and written as ONE
 * pipeline per `flushMs` (HINCRBY by the count per distinct field), instead of a dozen-command
 * pipeline per request — under load that write was a Redis round trip and ~0.3 ms of edge CPU per
 * request. A long-lived process can do this; a Workers isolate may be evicted between requests,
 * so the Workers entry keeps one write per request inside waitUntil.
 *
 * `record()` resolves when the batch holding the sample is stored (or rejects with the write's
 * error); `flush()` writes the open batch now (the Node entry's close()).
 * A batch is also written early once it holds `maxSamples`. The timer exists only while a batch
 * is open: an idle edge keeps none.
 */
import type { LatencyRecorder, LatencySample } from './latency-recorder.ts'
import { bucketIndex } from './histogram.ts'
import { addToBatch, sampleIncrements, writeBatch, type IncrementBatch, type LatencyRedis } from './redis-latency-store.ts'

export interface BatchingOptions {
  flushMs: number
  maxSamples: number
}

export const DEFAULT_BATCHING: BatchingOptions = { flushMs: 1000, maxSamples: 2000 }

interface OpenBatch {
  /** Samples that increment the same fields, counted under one key (fields are built at write time). */
  alike: Map<string, { sample: LatencySample; count: number }>
  samples: number
  /** Settles when the batch is stored. */
  written: Promise<void>
  /** Starts the write now (the batch is full). */
  writeNow: () => void
}

export function createBatchingLatencyRecorder(redis: LatencyRedis, options: BatchingOptions = DEFAULT_BATCHING): LatencyRecorder {
  let open: OpenBatch | undefined

  const openBatch = (): OpenBatch => {
    const alike: OpenBatch['alike'] = new Map()
    let writeNow!: () => void
    const due = new Promise<void>((resolve) => (writeNow = resolve))
    const timer = setTimeout(writeNow, options.flushMs)
    const batch: OpenBatch = {
      alike,
      samples: 0,
      writeNow,
      written: due.then(() => {
        clearTimeout(timer)
        if (open === batch) open = undefined
        const increments: IncrementBatch = new Map()
        for (const { sample, count } of alike.values()) sampleIncrements(sample, (key, field, ttl) => addToBatch(increments, key, field, ttl, count))
        return writeBatch(redis, increments)
      }),
    }
    // Callers get the same promise and handle its rejection; this keeps it from being unhandled.
    batch.written.catch(() => {})
    return batch
  }

  return {
    record(sample: LatencySample): Promise<void> {
      const batch = (open ??= openBatch())
      const key = alikeKey(sample)
      const seen = batch.alike.get(key)
      if (seen) seen.count++
      else batch.alike.set(key, { sample, count: 1 })
      if (++batch.samples >= options.maxSamples) {
        open = undefined
        batch.writeNow()
      }
      return batch.written
    },
    flush() {
      const batch = open
      open = undefined
      batch?.writeNow()
      return batch ? batch.written.catch(() => {}) : Promise.resolve()
    },
  }
}

/** Everything sampleIncrements reads, reduced to what changes the fields it increments. */
function alikeKey(s: LatencySample): string {
  const minute = Math.floor(s.endedAtMs / 60_000)
  const ttfb = s.ttfbMs === undefined ? '' : bucketIndex(s.ttfbMs)
  return `${minute}\u0001${s.tenant ?? '\u0002'}\u0001${s.edge}\u0001${s.nodeRegion ?? '\u0002'}\u0001${s.outcome}\u0001${ttfb}\u0001${bucketIndex(s.totalMs)}`
}
