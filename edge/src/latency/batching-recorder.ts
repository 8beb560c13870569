/**
 * Latency samples counted in memory (alike samples — same minute, tenant, edge, region, outcome
 * and histogram buckets — under one key) and written as ONE pipeline per `flushMs` (HINCRBY by
 * the count per distinct field), instead of a dozen-command pipeline per request — under load
 * that write was a Redis round trip (a subrequest to Upstash on Workers) and ~0.3 ms of edge CPU
 * per request. A batch is also written early once it holds `maxSamples`. The timer exists only
 * while a batch is open: an idle edge keeps none.
 *
 * Two ways to own the write:
 * - Node entry (default): a long-lived process, whose timer writes each batch. The `record()` of
 *   the sample that OPENS a batch is the batch's write: it resolves when the batch is stored (or
 *   rejects with a LatencyBatchError, which observe-request.ts logs once with the count of samples
 *   lost); every other `record()` resolves at once. One promise per batch waits out `flushMs`, not
 *   one per request: at c64 on one core those were the only per-request objects living a second,
 *   all promoted to the old generation (docs/PERFORMANCE.md). `flush()` writes the open batch now
 *   (the Node entry's close(), which then awaits the opener's waitUntil).
 * - `ownerWrites` (Workers entry): workerd forbids using one request's I/O from another, and a
 *   promise settled by another request's I/O may never settle for this one. Samples are plain
 *   data, so they are still summed across requests in isolate memory; but the request whose
 *   sample OPENS a batch owns its write: the timer is set in that request's context, and that
 *   request's `record()` promise (which observe-request.ts hands to waitUntil) IS the write — it
 *   rejects if the write fails, so the failure is logged once, by the owner. Every other
 *   request's `record()` resolves at once — except the one whose sample FILLS the batch
 *   (`maxSamples`): it writes the batch at once, from its own context, and the owner's timer
 *   later finds nothing to write. (Resolving the owner's trigger from the filling request, as
 *   the Node mode does, left the owner's waitUntil hung in workerd: no request may settle
 *   another's promise.) So each batch is written by exactly one request, with its own I/O.
 *   The cost: samples sit in memory up to `flushMs` (+ the write) after their response. If the
 *   isolate is evicted meanwhile, workerd still lets the owner's waitUntil finish (well inside its
 *   30 s limit), so the batch is written; samples are lost only if the isolate dies abruptly
 *   (a crash, a CPU or memory limit), at most one batch — the Node entry loses its open batch
 *   the same way when the process is killed without close(). A batch whose owner never wrote it
 *   (its context gone while the isolate lives on) is noticed by the next record() once it is
 *   `flushMs` overdue, and its samples move into that request's batch instead of being dropped.
 */
import type { LatencyRecorder, LatencySample } from './latency-recorder.ts'
import { bucketIndex } from './histogram.ts'
import { addToBatch, sampleIncrements, writeBatch, type IncrementBatch, type KnownTtls, type LatencyRedis } from './redis-latency-store.ts'

export interface BatchingOptions {
  flushMs: number
  maxSamples: number
  /** The request that opens a batch writes it (one that fills it early: that one); the others' record() resolves at once (Workers). */
  ownerWrites?: boolean
  /** Clock for the overdue check (tests); default Date.now. */
  now?: () => number
}

/** A batch's write failed: its `samples` records are lost with it (the cause is the write's error). */
export class LatencyBatchError extends Error {
  override name = 'LatencyBatchError'
  constructor(readonly samples: number, cause: unknown) {
    super(`latency batch of ${samples} samples not stored`, { cause })
  }
}

export const DEFAULT_BATCHING: BatchingOptions = { flushMs: 1000, maxSamples: 2000 }

interface OpenBatch {
  /** Samples that increment the same fields, counted under one key (fields are built at write time). */
  alike: Map<string, { sample: LatencySample; count: number }>
  samples: number
  /** When its timer is due: a batch still open `flushMs` after that lost its owner (ownerWrites). */
  dueAtMs: number
  /** Another request took its samples (ownerWrites): its own write, when its timer fires, stores nothing. */
  taken: boolean
  /** Settles when the batch is stored. */
  written: Promise<void>
  /** Starts the write now (the batch is full). */
  writeNow: () => void
}

export function createBatchingLatencyRecorder(redis: LatencyRedis, options: BatchingOptions = DEFAULT_BATCHING): LatencyRecorder {
  const now = options.now ?? Date.now
  // Plain data, so Workers requests may share it: which hashes' EXPIRE this isolate has sent.
  const knownTtls: KnownTtls = new Set()
  let open: OpenBatch | undefined

  const store = (batch: OpenBatch): Promise<void> => {
    const increments: IncrementBatch = new Map()
    for (const { sample, count } of batch.alike.values()) sampleIncrements(sample, (key, field, ttl) => addToBatch(increments, key, field, ttl, count))
    return writeBatch(redis, increments, knownTtls).catch((e: unknown) => {
      throw new LatencyBatchError(batch.samples, e)
    })
  }

  /** A new batch; `stale`: one whose owner never wrote it, whose samples it takes over. */
  const openBatch = (stale?: OpenBatch): OpenBatch => {
    const alike: OpenBatch['alike'] = new Map()
    let writeNow!: () => void
    const due = new Promise<void>((resolve) => (writeNow = resolve))
    // Set by the caller of record(): with ownerWrites, inside the owning request's context.
    const timer = setTimeout(writeNow, options.flushMs)
    const batch: OpenBatch = {
      alike,
      samples: 0,
      dueAtMs: now() + options.flushMs,
      taken: false,
      writeNow,
      written: due.then(() => {
        clearTimeout(timer)
        if (open === batch) open = undefined
        return batch.taken ? undefined : store(batch)
      }),
    }
    // Callers get the same promise and handle its rejection; this keeps it from being unhandled.
    batch.written.catch(() => {})
    if (stale) {
      stale.taken = true
      for (const [key, { sample, count }] of stale.alike) add(batch, key, sample, count)
      batch.samples = stale.samples
    }
    return batch
  }

  return {
    record(sample: LatencySample): Promise<void> {
      const stale = options.ownerWrites && open && now() > open.dueAtMs + options.flushMs ? open : undefined
      const opened = open === undefined || stale !== undefined
      const batch = opened ? (open = openBatch(stale)) : open!
      add(batch, alikeKey(sample), sample, 1)
      if (++batch.samples >= options.maxSamples) {
        open = undefined
        // Filled by another request than its owner: this one writes it (waking the owner from
        // here left the owner hung in workerd; see above). The owner's timer finds it taken.
        if (options.ownerWrites && !opened) {
          batch.taken = true
          return store(batch)
        }
        batch.writeNow()
      }
      return opened ? batch.written : Promise.resolve()
    },
    flush() {
      const batch = open
      open = undefined
      batch?.writeNow()
      return batch ? batch.written.catch(() => {}) : Promise.resolve()
    },
  }
}

function add(batch: OpenBatch, key: string, sample: LatencySample, count: number): void {
  const seen = batch.alike.get(key)
  if (seen) seen.count += count
  else batch.alike.set(key, { sample, count })
}

/** Everything sampleIncrements reads, reduced to what changes the fields it increments. */
function alikeKey(s: LatencySample): string {
  const minute = Math.floor(s.endedAtMs / 60_000)
  const ttfb = s.ttfbMs === undefined ? '' : bucketIndex(s.ttfbMs)
  return `${minute}\u0001${s.tenant ?? '\u0002'}\u0001${s.edge}\u0001${s.nodeRegion ?? '\u0002'}\u0001${s.outcome}\u0001${ttfb}\u0001${bucketIndex(s.totalMs)}`
}
