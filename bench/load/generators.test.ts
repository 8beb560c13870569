/** The load shapes keep their bounds: concurrency, count, time, and abort at the deadline. */
import { describe, expect, it } from 'vitest'
import { closedLoop, openLoop } from './generators.ts'

/** A request that takes `ms` or ends early when aborted; records how many run at once. */
function fakeServer() {
  let running = 0
  let peak = 0
  const run = (ms: number) => (_i: number, signal: AbortSignal) =>
    new Promise<'done' | 'aborted'>((resolve) => {
      running++
      peak = Math.max(peak, running)
      const finish = (how: 'done' | 'aborted') => {
        running--
        clearTimeout(timer)
        resolve(how)
      }
      const timer = setTimeout(() => finish('done'), ms)
      signal.addEventListener('abort', () => finish('aborted'), { once: true })
    })
  return { run, peak: () => peak }
}

describe('closed loop', () => {
  it('keeps exactly `concurrency` requests running and stops at maxRequests', async () => {
    const server = fakeServer()
    const r = await closedLoop({ concurrency: 4, maxRequests: 22, durationMs: 10_000, graceMs: 1000, run: server.run(2) })
    expect(r.results).toHaveLength(22)
    expect(r.results.every((x) => x === 'done')).toBe(true)
    expect(server.peak()).toBe(4)
  })

  it('sends nothing new after its duration and aborts what still runs after the grace', async () => {
    const server = fakeServer()
    const r = await closedLoop({ concurrency: 3, durationMs: 30, graceMs: 20, run: server.run(10_000) })
    expect(r.results).toEqual(['aborted', 'aborted', 'aborted'])
    expect(r.endedAtMs).toBeLessThan(5000)
  })
})

describe('open loop', () => {
  it('sends each arrival on time regardless of the server, drops beyond maxInFlight, skips arrivals past the deadline', async () => {
    const server = fakeServer()
    const r = await openLoop({ arrivalsMs: [0, 0, 0, 0, 5, 10, 500], deadlineMs: 100, drainMs: 50, maxInFlight: 3, run: server.run(10_000) })
    expect(server.peak()).toBe(3)
    expect(r.dropped).toBe(3)
    expect(r.unsent).toBe(1)
    // The three that ran were cut off at deadline + drain.
    expect(r.results.filter((x) => x === 'aborted')).toHaveLength(3)
    expect(r.results.filter((x) => x === undefined)).toHaveLength(4)
  })
})
