/**
 * Load shapes, independent of what a "request" is (an HTTP call or an in-process engine
 * submit): open loop — arrivals at given times (Poisson) regardless of how the server keeps up —
 * and closed loop — a fixed number of clients, each sending its next request when the previous
 * one ends. Both are bounded in count and in time, and stop by themselves: at the deadline every
 * request still running is told to stop through its AbortSignal.
 */
import { performance } from 'node:perf_hooks'
import { setMaxListeners } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'

export interface OpenLoopOptions<R> {
  /** Offsets from the start, ms, ascending (e.g. stats.poissonArrivals). */
  arrivalsMs: number[]
  /** Starts request i; must settle soon after `signal` aborts. */
  run: (i: number, signal: AbortSignal) => Promise<R>
  /** No arrival is sent after this offset; at `deadlineMs + drainMs` running requests are aborted. */
  deadlineMs: number
  /** Extra time after the last arrival for requests to finish before they are cut off. */
  drainMs: number
  /** Arrivals while this many are running are dropped (and counted): memory stays bounded. */
  maxInFlight?: number
}

export interface OpenLoopResult<R> {
  /** Per arrival: its result, or undefined if it was dropped or never sent. */
  results: Array<R | undefined>
  /** performance.now() at offset 0. */
  startedAt: number
  dropped: number
  /** Arrivals not sent because the deadline came first. */
  unsent: number
  /** When the run ended, ms after the start. */
  endedAtMs: number
}

export async function openLoop<R>(o: OpenLoopOptions<R>): Promise<OpenLoopResult<R>> {
  const ctrl = new AbortController()
  // Every running request listens on the one deadline signal.
  setMaxListeners(0, ctrl.signal)
  const results: Array<R | undefined> = new Array(o.arrivalsMs.length).fill(undefined)
  const running = new Set<Promise<void>>()
  const startedAt = performance.now()
  let dropped = 0
  let unsent = 0
  const cutoff = setTimeout(() => ctrl.abort(), o.deadlineMs + o.drainMs)
  for (let i = 0; i < o.arrivalsMs.length; i++) {
    const at = o.arrivalsMs[i]
    if (at > o.deadlineMs) {
      unsent = o.arrivalsMs.length - i
      break
    }
    const wait = startedAt + at - performance.now()
    if (wait > 1) await sleep(wait)
    if (o.maxInFlight !== undefined && running.size >= o.maxInFlight) {
      dropped++
      continue
    }
    const p: Promise<void> = o.run(i, ctrl.signal).then(
      (r) => void (results[i] = r),
      () => {},
    ).finally(() => running.delete(p))
    running.add(p)
  }
  await Promise.all([...running])
  clearTimeout(cutoff)
  return { results, startedAt, dropped, unsent, endedAtMs: performance.now() - startedAt }
}

export interface ClosedLoopOptions<R> {
  concurrency: number
  run: (i: number, signal: AbortSignal) => Promise<R>
  /** No request starts after this; running ones are aborted at durationMs + graceMs. */
  durationMs: number
  graceMs: number
  /** Total requests across all clients (default unbounded, the duration bounds it). */
  maxRequests?: number
}

export interface ClosedLoopResult<R> {
  results: R[]
  startedAt: number
  endedAtMs: number
}

export async function closedLoop<R>(o: ClosedLoopOptions<R>): Promise<ClosedLoopResult<R>> {
  const ctrl = new AbortController()
  setMaxListeners(0, ctrl.signal)
  const results: R[] = []
  const startedAt = performance.now()
  const end = startedAt + o.durationMs
  const max = o.maxRequests ?? Number.MAX_SAFE_INTEGER
  let issued = 0
  const cutoff = setTimeout(() => ctrl.abort(), o.durationMs + o.graceMs)
  const client = async () => {
    while (performance.now() < end && issued < max && !ctrl.signal.aborted) {
      const i = issued++
      try {
        results.push(await o.run(i, ctrl.signal))
      } catch {
        // run() records its own failures; a throw only ends this client's request.
      }
    }
  }
  await Promise.all(Array.from({ length: o.concurrency }, client))
  clearTimeout(cutoff)
  return { results, startedAt, endedAtMs: performance.now() - startedAt }
}
