/**
 * The batching recorder's `ownerWrites` mode (the Workers entry): the request whose sample opens
 * a batch is the one whose record() promise writes it (or, for a batch that fills before its
 * timer, the request that filled it); every other request's record() resolves at once, and no
 * request waits on I/O it did not start. Redis is a fake on the other side of the
 * LatencyRedis boundary that keeps every pipeline's commands, so the writes are counted and
 * their sums checked against what one write per sample would have sent.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createBatchingLatencyRecorder, LatencyBatchError } from './batching-recorder.ts'
import type { LatencySample } from './latency-recorder.ts'
import { recordFailed } from './observe-request.ts'
import { addToBatch, sampleIncrements, type IncrementBatch, type LatencyPipeline, type LatencyRedis } from './redis-latency-store.ts'

type Command = [op: 'hincrby', key: string, field: string, n: number] | [op: 'expire', key: string, seconds: number]

/**
 * Pipelines as sent, answered like Redis (HINCRBY: the field's new value); `failNext` makes the
 * next exec reject, `hold` keeps execs pending until `release`.
 */
function fakeRedis() {
  const execs: Command[][] = []
  const values = new Map<string, number>()
  let fail: Error | undefined
  let held: Array<() => void> | undefined
  const answer = (c: Command) => (c[0] === 'expire' ? 1 : values.set(`${c[1]} ${c[2]}`, (values.get(`${c[1]} ${c[2]}`) ?? 0) + c[3]).get(`${c[1]} ${c[2]}`))
  const redis: LatencyRedis = {
    pipeline(): LatencyPipeline {
      const commands: Command[] = []
      return {
        hincrby: (key, field, n) => void commands.push(['hincrby', key, field, n]),
        expire: (key, seconds) => void commands.push(['expire', key, seconds]),
        hgetall: () => {},
        exec: () => {
          execs.push(commands)
          const error = fail
          fail = undefined
          if (error) return Promise.reject(error)
          const replies = commands.map(answer)
          if (held) return new Promise((resolve) => held!.push(() => resolve(replies)))
          return Promise.resolve(replies)
        },
      }
    },
  }
  return {
    redis,
    execs,
    failNext: (e: Error) => void (fail = e),
    hold: () => void (held = []),
    release: () => {
      for (const r of held ?? []) r()
      held = undefined
    },
  }
}

const OWNER = { flushMs: 60_000, maxSamples: 1000, ownerWrites: true }

function sample(i: number, endedAtMs: number): LatencySample {
  return {
    requestId: `r${i}`,
    endedAtMs,
    edge: i % 2 ? 'fra' : 'iad',
    nodeRegion: i % 3 ? 'eu-west' : 'us-east',
    tenant: `t${i % 2}`,
    status: 200,
    outcome: 'ok',
    ttfbMs: 1 + (i * 37) % 400,
    totalMs: 5 + (i * 91) % 5000,
    failovers: 0,
  }
}

/** What the pipelines added up to, per key and field (EXPIREs apart). */
function summed(execs: Command[][]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const c of execs.flat()) if (c[0] === 'hincrby') out[`${c[1]} ${c[2]}`] = (out[`${c[1]} ${c[2]}`] ?? 0) + c[3]
  return out
}

/** What one write per sample would add up to. */
function perSample(samples: LatencySample[]): Record<string, number> {
  const batch: IncrementBatch = new Map()
  for (const s of samples) sampleIncrements(s, (key, field, ttl) => addToBatch(batch, key, field, ttl))
  const out: Record<string, number> = {}
  for (const [key, { fields }] of batch) for (const [field, n] of fields) out[`${key} ${field}`] = n
  return out
}

/** 'pending' unless `p` settled within the microtasks queued so far (no I/O, no timers). */
async function state(p: Promise<void>): Promise<'fulfilled' | 'rejected' | 'pending'> {
  const pending = Symbol('pending')
  const r = await Promise.race([p.then(() => 'fulfilled' as const, () => 'rejected' as const), new Promise((resolve) => setImmediate(() => resolve(pending)))])
  return r === pending ? 'pending' : (r as 'fulfilled' | 'rejected')
}

afterEach(() => {
  vi.restoreAllMocks()
})

describe('batching recorder, ownerWrites', () => {
  it('writes the samples of many requests as one pipeline, from the opener’s record()', async () => {
    const fake = fakeRedis()
    fake.hold()
    const recorder = createBatchingLatencyRecorder(fake.redis, { ...OWNER, flushMs: 20 })
    const now = Date.now()
    const samples = Array.from({ length: 50 }, (_, i) => sample(i, now))
    const [opener, ...others] = samples.map((s) => recorder.record(s))
    // The others resolved at once, before anything was written.
    expect(await Promise.all(others.map(state))).toEqual(others.map(() => 'fulfilled'))
    expect(fake.execs).toHaveLength(0)
    expect(await state(opener!)).toBe('pending')
    // The opener's timer fires (flushMs): one pipeline; the opener resolves once it is stored.
    await vi.waitFor(() => expect(fake.execs).toHaveLength(1), { timeout: 5000, interval: 5 })
    expect(await state(opener!)).toBe('pending')
    fake.release()
    await opener
    expect(fake.execs).toHaveLength(1)
    expect(summed(fake.execs)).toEqual(perSample(samples))
    // One EXPIRE per hash: 2 resolutions × (all + 2 tenants).
    expect(fake.execs[0]!.filter((c) => c[0] === 'expire')).toHaveLength(6)
  })

  it('rejects only the opener’s record() when the write fails, saying how many samples were lost', async () => {
    const fake = fakeRedis()
    const recorder = createBatchingLatencyRecorder(fake.redis, { ...OWNER, flushMs: 5 })
    class UpstashError extends Error {
      override name = 'UpstashError'
    }
    fake.failNext(new UpstashError('ECONNREFUSED zl:lat:m:1:t:secret-tenant'))
    const results = await Promise.allSettled([0, 1, 2].map((i) => recorder.record(sample(i, Date.now()))))
    expect(results.map((r) => r.status)).toEqual(['rejected', 'fulfilled', 'fulfilled'])
    const reason = (results[0] as PromiseRejectedResult).reason as unknown
    expect(reason).toBeInstanceOf(LatencyBatchError)
    // The owner's warning (observe-request.ts) names the write's error and the batch, never its message.
    expect(recordFailed('r0', reason)).toEqual({ level: 'warn', msg: 'latency record failed', requestId: 'r0', error: 'UpstashError', samples: 3 })
    expect(fake.execs).toHaveLength(1)
    // The next sample opens (and owns) a new batch.
    await recorder.record(sample(3, Date.now()))
    expect(fake.execs).toHaveLength(2)
  })

  it('writes a full batch at once, before flushMs, from the record() of the request that filled it', async () => {
    const fake = fakeRedis()
    const recorder = createBatchingLatencyRecorder(fake.redis, { ...OWNER, flushMs: 300, maxSamples: 4 })
    const now = Date.now()
    const [opener, second, third, filler] = [0, 1, 2, 3].map((i) => recorder.record(sample(i, now)))
    expect(await Promise.all([second!, third!].map(state))).toEqual(['fulfilled', 'fulfilled'])
    // The filler's own I/O: no request settles another's promise (in workerd that left the
    // opener hung). The opener's timer has not fired yet.
    await filler
    expect(fake.execs).toHaveLength(1)
    expect(summed(fake.execs)).toEqual(perSample([0, 1, 2, 3].map((i) => sample(i, now))))
    expect(await state(opener!)).toBe('pending')
    // The next sample opens (and owns) a new batch.
    const next = recorder.record(sample(4, now))
    // The opener's timer finds its batch taken: it resolves without a second write.
    await opener
    expect(fake.execs).toHaveLength(1)
    await next
    expect(fake.execs).toHaveLength(2)
    expect(summed(fake.execs.slice(1))).toEqual(perSample([sample(4, now)]))
  })

  it('moves the samples of a batch whose owner never wrote it into the next request’s batch', { timeout: 5000 }, async () => {
    const fake = fakeRedis()
    let clock = Date.now()
    const recorder = createBatchingLatencyRecorder(fake.redis, { ...OWNER, flushMs: 20, now: () => clock })
    // The owner's request context is gone: its timer never fires.
    vi.spyOn(globalThis, 'setTimeout').mockImplementationOnce((() => 0) as unknown as typeof setTimeout)
    const t0 = clock
    void recorder.record(sample(0, t0))
    void recorder.record(sample(1, t0))
    clock += 41 // more than flushMs past the stale batch's due time
    const adopter = recorder.record(sample(2, t0))
    await adopter
    // One write, by the adopter, of all three samples.
    expect(fake.execs).toHaveLength(1)
    expect(summed(fake.execs)).toEqual(perSample([0, 1, 2].map((i) => sample(i, t0))))
  })

  it("without ownerWrites the timer writes, and only the opener's record waits for it (the Node entry)", async () => {
    const fake = fakeRedis()
    fake.hold()
    const recorder = createBatchingLatencyRecorder(fake.redis, { flushMs: 5, maxSamples: 1000 })
    const writes = [0, 1].map((i) => recorder.record(sample(i, Date.now())))
    await vi.waitFor(() => expect(fake.execs).toHaveLength(1), { timeout: 5000, interval: 5 })
    expect(await Promise.all(writes.map(state))).toEqual(['pending', 'fulfilled'])
    fake.release()
    await Promise.all(writes)
  })
})
