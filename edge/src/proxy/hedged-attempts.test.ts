import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { HedgedAttempts, type Settled } from './hedged-attempts.ts'

type Outcome = 'ok' | 'fail'

/** Nodes answering after `ms` with `outcome` (no entry: never), and a record of each start with its timeout. */
function fleet(plan: Record<string, { ms: number; outcome: Outcome } | undefined>, hedgeAfterMs?: number) {
  const t0 = Date.now()
  const starts: Array<{ node: string; atMs: number; timeoutMs: number }> = []
  const late: Array<Settled<string, Outcome>> = []
  const attempts = new HedgedAttempts<string, Outcome>({
    nodes: Object.keys(plan),
    send: (node, timeoutMs) => {
      starts.push({ node, atMs: Date.now() - t0, timeoutMs })
      const p = plan[node]
      // A node that never answers is ended by its timeout, as the upstream ends it.
      return new Promise((resolve) => setTimeout(() => resolve(p ? p.outcome : 'fail'), p ? p.ms : timeoutMs))
    },
    ...(hedgeAfterMs === undefined ? {} : { hedgeAfterMs }),
    timeoutMs: 1000,
    now: Date.now,
    settledLate: (s) => late.push(s),
  })
  return { attempts, starts, late, elapsed: () => Date.now() - t0 }
}

/** `p` once `ms` of (fake) time have passed: timers fire in order, so ties and load cannot reorder them. */
async function after<T>(ms: number, p: Promise<T>): Promise<T> {
  await vi.advanceTimersByTimeAsync(ms)
  return p
}

describe('HedgedAttempts', () => {
  beforeEach(() => vi.useFakeTimers())
  afterEach(() => vi.useRealTimers())

  it('asks only the first node when it answers in time', async () => {
    const f = fleet({ a: { ms: 5, outcome: 'ok' }, b: { ms: 5, outcome: 'ok' } }, 200)
    expect(await after(5, f.attempts.settle())).toEqual({ node: 'a', attempt: 'ok' })
    expect(f.starts.map((s) => s.node)).toEqual(['a'])
  })

  it('asks the next node beside a silent one after the hedge delay, and takes whichever answers first', async () => {
    // a answers at 250 ms (after two 100 ms hedges), b and c never: a's late answer is the answer.
    const f = fleet({ a: { ms: 250, outcome: 'ok' }, b: undefined, c: undefined }, 100)
    expect(await after(250, f.attempts.settle())).toEqual({ node: 'a', attempt: 'ok' })
    expect(f.starts.map((s) => [s.node, s.atMs])).toEqual([['a', 0], ['b', 100], ['c', 200]])
    // Every attempt started on schedule ends by the same deadline: n × hedge delay after the first.
    expect(f.starts.map((s) => s.timeoutMs)).toEqual([300, 200, 100])
    expect(f.elapsed()).toBe(250)
    f.attempts.abandon()
  })

  it('hands attempts still running when an answer was taken to settledLate', async () => {
    const f = fleet({ a: { ms: 150, outcome: 'ok' }, b: { ms: 80, outcome: 'ok' } }, 50)
    // b (started at 50 ms, answers at 130) wins over a (150).
    expect(await after(130, f.attempts.settle())).toEqual({ node: 'b', attempt: 'ok' })
    f.attempts.abandon()
    await vi.advanceTimersByTimeAsync(20)
    expect(f.late).toEqual([{ node: 'a', attempt: 'ok' }])
    expect(await f.attempts.settle()).toBeUndefined()
  })

  it('moves on at once after a failure, and reports every attempt when none answers', async () => {
    const f = fleet({ a: { ms: 5, outcome: 'fail' }, b: { ms: 5, outcome: 'fail' }, c: { ms: 5, outcome: 'fail' } }, 1000)
    const seen: string[] = []
    for (let s = await after(5, f.attempts.settle()); s; s = await after(5, f.attempts.settle())) {
      seen.push(`${s.node}:${s.attempt}`)
      f.attempts.moveOn()
    }
    expect(seen).toEqual(['a:fail', 'b:fail', 'c:fail'])
    // Each next attempt starts the moment the one before failed, not after the hedge delay.
    expect(f.starts.map((s) => s.atMs)).toEqual([0, 5, 10])
    expect(f.attempts.started).toBe(3)
  })

  it('without a hedge delay runs one attempt at a time, each with its own timeout', async () => {
    const f = fleet({ a: undefined, b: { ms: 5, outcome: 'ok' } })
    const first = await after(1000, f.attempts.settle())
    expect(first).toEqual({ node: 'a', attempt: 'fail' })
    expect(f.starts.map((s) => [s.node, s.timeoutMs])).toEqual([['a', 1000]])
    f.attempts.moveOn()
    expect(await after(5, f.attempts.settle())).toEqual({ node: 'b', attempt: 'ok' })
    expect(f.starts.map((s) => [s.node, s.timeoutMs])).toEqual([['a', 1000], ['b', 1000]])
  })

  it('rejects with the first rejection (the client left) and leaves no unhandled one behind', async () => {
    const attempts = new HedgedAttempts<string, Outcome>({
      nodes: ['a', 'b'],
      send: (node) => new Promise((_, reject) => setTimeout(() => reject(new Error(`gone ${node}`)), node === 'a' ? 60 : 30)),
      hedgeAfterMs: 10,
      timeoutMs: 1000,
      now: Date.now,
      settledLate: () => {},
    })
    const rejected = expect(attempts.settle()).rejects.toThrow('gone b')
    await vi.advanceTimersByTimeAsync(40)
    await rejected
    // a rejects 30 ms later with no one awaiting it: an unhandled rejection would fail this file.
    await vi.advanceTimersByTimeAsync(30)
  })
})
