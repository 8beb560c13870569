import { describe, expect, it } from 'vitest'
import { staticBatching } from '../../test/support/static-batching.ts'
import { BURST_CHUNKS, chunkFor, INTERACTIVE_LINGER_MS, Scheduler, type SchedulerLimits } from './scheduler.ts'
import { letterDecoder, ScriptedRunner } from '../../test/support/scripted-runner.ts'
import { Sequence } from './sequence.ts'
import { CLASS_PRIORITY } from '../../../shared/src/priority.ts'
import { GREEDY, type EngineEvent, type RequestEvent } from './types.ts'

const BYTES_PER_TOKEN = 8

function limits(over: Partial<SchedulerLimits> = {}): SchedulerLimits {
  return { maxBatch: 8, maxQueue: 64, kvBudgetBytes: 1 << 30, kvBytesPerToken: BYTES_PER_TOKEN, prefillChunkTokens: 4, ...over }
}

let nextId = 1
/** Each test sequence's events by request id, delivered as the engine does from what the scheduler returns. */
const inbox = new Map<string, EngineEvent[]>()
function deliver(events: readonly RequestEvent[]): void {
  for (const { id, event } of events) inbox.get(id)?.push(event)
}

function seq(promptLen: number, maxTokens: number, priority = 0) {
  const events: EngineEvent[] = []
  const id = nextId++
  const req = { id: `s${id}`, promptTokens: Array.from({ length: promptLen }, (_, i) => 1 + (i % 20)), maxTokens, stop: [], sampling: GREEDY, priority }
  inbox.set(req.id, events)
  const s = new Sequence(id, id, req, letterDecoder, [0], 0)
  const text = () => events.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('')
  return { s, events, text }
}

/** Drives scheduler + runner to completion; returns every plan with the KV bytes it touched. */
async function drive(sched: Scheduler, runner: ScriptedRunner, maxTicks = 10_000) {
  const touched: number[] = []
  for (let tick = 0; tick < maxTicks && sched.hasWork; tick++) {
    const plan = sched.schedule(0)
    const rowsBefore = sched.running.length
    const bytes = sched.kvBytesNextStep()
    const result = await runner.step(plan)
    if (plan.decode) {
      expect(result.decoded.seqIds).toHaveLength(rowsBefore)
      touched.push(bytes)
    }
    deliver(sched.update(plan, result))
  }
  return touched
}

describe('Scheduler', () => {
  it('prefills a long prompt one chunk per tick while others keep decoding', async () => {
    const sched = new Scheduler(limits())
    const runner = new ScriptedRunner()
    const a = seq(2, 20)
    sched.add(a.s)
    await runner.step(sched.schedule(0)).then((r) => deliver(sched.update(runner.plans[0], r)))
    const b = seq(10, 3)
    sched.add(b.s)
    const plans = []
    for (let i = 0; i < 3; i++) {
      const plan = sched.schedule(0)
      plans.push(plan)
      deliver(sched.update(plan, await runner.step(plan)))
    }
    expect(plans.map((p) => p.prefill.map((x) => x.tokens.length))).toEqual([[4], [4], [2]])
    expect(plans.map((p) => p.prefill.map((x) => x.last))).toEqual([[false], [false], [true]])
    expect(plans.every((p) => p.decode)).toBe(true)
    expect(sched.running.map((s) => s.seqId)).toEqual([a.s.seqId, b.s.seqId])
  })

  it('packs several whole short prompts into one chunk while count × longest fits', async () => {
    const sched = new Scheduler(limits({ prefillChunkTokens: 3 }))
    const runner = new ScriptedRunner()
    const short = [seq(3, 2), seq(4, 2), seq(2, 2), seq(3, 2)]
    for (const x of short) sched.add(x.s)
    const first = sched.schedule(0)
    // Four waiting, none decoding: a chunk of 4 × 3 = 12. 3 prompts × longest 4 = 12 fits; a fourth would make 16.
    expect(first.prefill.map((p) => p.seqId)).toEqual(short.slice(0, 3).map((x) => x.s.seqId))
    expect(first.prefill.every((p) => p.last && p.start)).toBe(true)
    deliver(sched.update(first, await runner.step(first)))
    expect(sched.running).toHaveLength(3)
    await drive(sched, runner)
    for (const x of short) expect(x.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
  })

  it('sizes the chunk by the prompts waiting per decoding row, from one chunk to BURST_CHUNKS', () => {
    expect(chunkFor(128, 1, 0)).toBe(128)
    expect(chunkFor(128, 15, 1)).toBe(128 * BURST_CHUNKS)
    expect(chunkFor(128, 6, 2)).toBe(384)
    expect(chunkFor(128, 16, 16)).toBe(128)
    expect(chunkFor(128, 3, 16)).toBe(128)
  })

  it('prefills a burst beside one decoding row in one tick, and the same prompts beside a full batch a chunk at a time', async () => {
    const burstTicks = async (decoding: number, priority = 0) => {
      const sched = new Scheduler(limits({ maxBatch: 32, prefillChunkTokens: 8 }))
      const runner = new ScriptedRunner()
      for (let i = 0; i < decoding; i++) sched.add(seq(2, 100).s)
      const warm = sched.schedule(0)
      deliver(sched.update(warm, await runner.step(warm)))
      expect(sched.running).toHaveLength(decoding)
      const burst = Array.from({ length: 8 }, () => seq(4, 1, priority))
      for (const x of burst) sched.add(x.s)
      const ticks: number[] = []
      while (burst.some((x) => x.s.state === 'waiting' || x.s.state === 'prefilling')) {
        const plan = sched.schedule(0)
        ticks.push(plan.prefill.length)
        deliver(sched.update(plan, await runner.step(plan)))
      }
      return ticks
    }
    // 8 waiting per decoding row: a chunk of 8 × 8 tokens takes all eight 4-token prompts.
    expect(await burstTicks(1)).toEqual([8])
    // 8 rows decoding: a chunk of 8 tokens, two prompts a tick.
    expect(await burstTicks(8)).toEqual([2, 2, 2, 2])
    // Batch-class prompts never widen the chunk: their first tokens are not waited on.
    expect(await burstTicks(1, CLASS_PRIORITY.batch)).toEqual([2, 2, 2, 2])
  })

  it('gives a prompt longer than the chunk the chunk to itself', async () => {
    const sched = new Scheduler(limits({ prefillChunkTokens: 4 }))
    const long = seq(9, 1)
    const short = seq(1, 1)
    sched.add(long.s)
    sched.add(short.s)
    const plan = sched.schedule(0)
    expect(plan.prefill).toHaveLength(1)
    expect(plan.prefill[0]).toMatchObject({ seqId: long.s.seqId, last: false })
  })

  it('releases a finished sequence in the very next plan', async () => {
    const sched = new Scheduler(limits())
    const runner = new ScriptedRunner()
    const a = seq(2, 1)
    sched.add(a.s)
    const first = sched.schedule(0)
    deliver(sched.update(first, await runner.step(first)))
    expect(a.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
    expect(sched.schedule(0).release).toEqual([a.s.seqId])
  })

  it('never lets a decode step touch more KV bytes than the budget', async () => {
    const budget = 3 * 40 * BYTES_PER_TOKEN
    const sched = new Scheduler(limits({ kvBudgetBytes: budget }))
    const runner = new ScriptedRunner()
    const seqs = Array.from({ length: 6 }, (_, i) => seq(4 + i, 24))
    for (const x of seqs) sched.add(x.s)
    const touched = await drive(sched, runner)
    expect(Math.max(...touched)).toBeLessThanOrEqual(budget)
    for (const x of seqs) expect(x.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
  })

  it('caps the batch at maxBatch rows', async () => {
    const sched = new Scheduler(limits({ maxBatch: 3 }))
    const runner = new ScriptedRunner()
    for (let i = 0; i < 7; i++) sched.add(seq(3, 10).s)
    let maxRows = 0
    while (sched.hasWork) {
      const plan = sched.schedule(0)
      const result = await runner.step(plan)
      maxRows = Math.max(maxRows, result.kvRows)
      deliver(sched.update(plan, result))
    }
    expect(maxRows).toBe(3)
  })

  it('preempts the latest arrival when growth breaks the budget, and it later finishes with the same text', async () => {
    // Two sequences fit at the start; as they grow, only one does.
    const budget = 2 * 12 * BYTES_PER_TOKEN
    const sched = new Scheduler(limits({ kvBudgetBytes: budget }), { onPreempted: (s) => preempted.push(s.seqId) })
    const preempted: number[] = []
    const runner = new ScriptedRunner()
    const early = seq(3, 16)
    const late = seq(3, 16)
    sched.add(early.s)
    sched.add(late.s)
    const touched = await drive(sched, runner)
    expect(preempted).toContain(late.s.seqId)
    expect(preempted).not.toContain(early.s.seqId)
    expect(Math.max(...touched)).toBeLessThanOrEqual(Math.max(budget, 20 * BYTES_PER_TOKEN))

    // Reference: the same prompt alone, no budget pressure.
    const refSched = new Scheduler(limits())
    const ref = seq(3, 16)
    refSched.add(ref.s)
    await drive(refSched, new ScriptedRunner())
    expect(late.text()).toBe(ref.text())
    expect(late.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length', usage: { completionTokens: 16 } })
  })

  it('admits by priority, then arrival', async () => {
    const sched = new Scheduler(limits({ maxBatch: 1 }))
    const low = seq(2, 1, 5)
    const high = seq(2, 1, 0)
    const high2 = seq(2, 1, 0)
    sched.add(low.s)
    sched.add(high.s)
    sched.add(high2.s)
    const order: number[] = []
    const runner = new ScriptedRunner()
    while (sched.hasWork) {
      const plan = sched.schedule(0)
      for (const part of plan.prefill) if (part.start) order.push(part.seqId)
      deliver(sched.update(plan, await runner.step(plan)))
    }
    expect(order).toEqual([high.s.seqId, high2.s.seqId, low.s.seqId])
  })

  it('gives a waiting request of better priority a running batch row\'s place; the row is recomputed to the same text', async () => {
    const ref = seq(3, 12, 1000)
    const refSched = new Scheduler(limits({ maxBatch: 1 }))
    refSched.add(ref.s)
    await drive(refSched, new ScriptedRunner())

    const sched = new Scheduler(limits({ maxBatch: 1 }))
    const runner = new ScriptedRunner()
    const batch = seq(3, 12, 1000)
    sched.add(batch.s)
    for (let i = 0; i < 4; i++) {
      const plan = sched.schedule(0)
      deliver(sched.update(plan, await runner.step(plan)))
    }
    expect(sched.running).toEqual([batch.s])
    const interactive = seq(2, 3, 0)
    sched.add(interactive.s)
    const plan = sched.schedule(0)
    expect(plan.prefill.map((p) => p.seqId)).toEqual([interactive.s.seqId])
    expect(plan.release).toContain(batch.s.seqId)
    expect(batch.s.state).toBe('waiting')
    deliver(sched.update(plan, await runner.step(plan)))
    await drive(sched, runner)
    expect(interactive.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
    expect(batch.text()).toBe(ref.text())
    // Equal priorities never preempt each other for a place.
    const a = seq(3, 12, 0)
    const b = seq(2, 3, 0)
    const same = new Scheduler(limits({ maxBatch: 1 }))
    same.add(a.s)
    const first = same.schedule(0)
    deliver(same.update(first, await runner.step(first)))
    same.add(b.s)
    expect(same.schedule(0).release).toEqual([])
    expect(a.s.state).toBe('running')
  })

  it('prefills a request of better priority than every running row in a tick of its own, then decodes them all', async () => {
    const sched = new Scheduler(limits({ maxBatch: 4 }))
    const runner = new ScriptedRunner()
    const ref = seq(3, 12, 1000)
    const refSched = new Scheduler(limits({ maxBatch: 4 }))
    refSched.add(ref.s)
    await drive(refSched, new ScriptedRunner())
    const batch = seq(3, 12, 1000)
    sched.add(batch.s)
    let plan = sched.schedule(0)
    deliver(sched.update(plan, await runner.step(plan)))
    const interactive = seq(2, 3, 0)
    sched.add(interactive.s)
    plan = sched.schedule(0)
    expect(plan.prefill.map((p) => p.seqId)).toEqual([interactive.s.seqId])
    expect(plan.decode).toBe(false)
    deliver(sched.update(plan, await runner.step(plan)))
    plan = sched.schedule(0)
    expect(plan.decode).toBe(true)
    deliver(sched.update(plan, await runner.step(plan)))
    await drive(sched, runner)
    // The batch row lost a step's time, never a token.
    expect(batch.text()).toBe(ref.text())
    expect(interactive.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
    // A prefill no better than some running row shares the tick with the decode, as before.
    const other = new Scheduler(limits({ maxBatch: 4 }))
    other.add(seq(3, 12, 1000).s)
    plan = other.schedule(0)
    deliver(other.update(plan, await runner.step(plan)))
    other.add(seq(2, 3, 1000).s)
    expect(other.schedule(0).decode).toBe(true)
  })

  it('holds batch-class rows to batchRowsBesideInteractive while interactive work is live and for INTERACTIVE_LINGER_MS after, never preempting them for it', async () => {
    const runner = new ScriptedRunner()
    const tick = async (sched: Scheduler, nowMs: number) => {
      const plan = sched.schedule(nowMs)
      deliver(sched.update(plan, await runner.step(plan)))
      return plan
    }
    const batchRows = (sched: Scheduler) => sched.running.filter((s) => s.priority >= CLASS_PRIORITY.batch).length
    const run = async (limit: number | undefined) => {
      const sched = new Scheduler(limits({ maxBatch: 8, ...(limit ? { batchRowsBesideInteractive: limit } : {}) }))
      const interactive = seq(2, 100, 0)
      sched.add(interactive.s)
      await tick(sched, 0)
      for (let i = 0; i < 5; i++) sched.add(seq(2, 100, 1000).s)
      for (let t = 1; t <= 6; t++) await tick(sched, t)
      const beside = batchRows(sched)
      sched.cancel(interactive.s, 'abort')
      await tick(sched, 10)
      for (let t = 11; t <= 14; t++) await tick(sched, t)
      const lingering = batchRows(sched)
      for (let t = 10 + INTERACTIVE_LINGER_MS; t <= 14 + INTERACTIVE_LINGER_MS; t++) await tick(sched, t)
      return { beside, lingering, after: batchRows(sched) }
    }
    expect(await run(2)).toEqual({ beside: 2, lingering: 2, after: 5 })
    // The control: without the limit every batch row joins beside the interactive one.
    expect(await run(undefined)).toEqual({ beside: 5, lingering: 5, after: 5 })

    // Batch rows already running when interactive work arrives finish; they are not preempted.
    const sched = new Scheduler(limits({ maxBatch: 8, batchRowsBesideInteractive: 2 }))
    for (let i = 0; i < 4; i++) sched.add(seq(2, 100, 1000).s)
    for (let t = 0; t < 4; t++) await tick(sched, t)
    expect(batchRows(sched)).toBe(4)
    sched.add(seq(2, 100, 0).s)
    const waiting = seq(2, 100, 1000)
    sched.add(waiting.s)
    for (let t = 4; t < 8; t++) expect((await tick(sched, t)).release).toEqual([])
    expect(batchRows(sched)).toBe(4)
    expect(sched.running).toHaveLength(5)
    expect(waiting.s.state).toBe('waiting')
  })

  it('takes a request of better priority into a full queue in place of its worst, which ends overloaded', () => {
    const sched = new Scheduler(limits({ maxQueue: 2 }))
    const batchEarly = seq(2, 4, 1000)
    const batchLate = seq(2, 4, 1000)
    expect(sched.add(batchEarly.s) && sched.add(batchLate.s)).toBe(true)
    const interactive = seq(2, 4, 0)
    expect(sched.add(interactive.s)).toBe(false)
    expect(sched.addInPlaceOfWorse(interactive.s, 'overloaded')).toBe(true)
    deliver(sched.takeEvents())
    expect(batchLate.events.at(-1)).toMatchObject({ type: 'finish', reason: 'error', error: { code: 'overloaded' } })
    expect([...sched.queue]).toEqual([interactive.s, batchEarly.s])
    // No queued request is worse than another batch one: it is refused, nothing changes.
    expect(sched.addInPlaceOfWorse(seq(2, 4, 1000).s, 'overloaded')).toBe(false)
    expect([...sched.queue]).toEqual([interactive.s, batchEarly.s])
  })

  it('cancels a sequence wherever it is and releases only what holds KV', async () => {
    const sched = new Scheduler(limits({ maxBatch: 2 }))
    const runner = new ScriptedRunner()
    const running = seq(2, 50)
    const prefilling = seq(12, 50)
    const waiting = seq(2, 50)
    sched.add(running.s)
    let plan = sched.schedule(0)
    deliver(sched.update(plan, await runner.step(plan)))
    sched.add(prefilling.s)
    sched.add(waiting.s)
    plan = sched.schedule(0)
    deliver(sched.update(plan, await runner.step(plan)))
    expect(sched.prefilling).toEqual([prefilling.s])
    for (const x of [running, prefilling, waiting]) sched.cancel(x.s, 'abort')
    deliver(sched.takeEvents())
    for (const x of [running, prefilling, waiting]) expect(x.events.at(-1)).toMatchObject({ type: 'finish', reason: 'abort' })
    plan = sched.schedule(0)
    expect(plan.release.sort()).toEqual([running.s.seqId, prefilling.s.seqId].sort())
    expect(plan.decode).toBe(false)
    const result = await runner.step(plan)
    expect(result.kvRows).toBe(0)
    expect(sched.hasWork).toBe(false)
  })

  it('with equal-length batching, starts a sequence only into an empty batch or beside rows of its length', async () => {
    const sched = new Scheduler(limits({ batching: 'equal-lengths', prefillChunkTokens: 12 }))
    const runner = new ScriptedRunner()
    const [a, b, c, d] = [seq(3, 4), seq(3, 4), seq(2, 4), seq(4, 2)]
    for (const x of [a, b, c, d]) sched.add(x.s)
    let plan = sched.schedule(0)
    // c's 2 tokens would be left-padded beside a and b: it waits (and, in queue order, so does d).
    expect(plan.prefill.map((p) => p.seqId)).toEqual([a.s.seqId, b.s.seqId])
    deliver(sched.update(plan, await runner.step(plan)))
    // a and b now hold 4 tokens each, as d's prompt does, but c is ahead of d in the queue.
    expect(sched.schedule(0).prefill).toEqual([])
    for (let tick = 0; tick < 100 && sched.hasWork; tick++) {
      plan = sched.schedule(0)
      deliver(sched.update(plan, await runner.step(plan)))
      // Every step's batch rows hold the same number of tokens: nothing is ever padded.
      expect(new Set(runner.rows.map((r) => r.len)).size).toBeLessThanOrEqual(1)
    }
    for (const x of [a, b, c, d]) expect(x.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
  })

  it('with equal-length batching, lets a whole prompt join rows it will equal in length', async () => {
    const sched = new Scheduler(limits({ batching: 'equal-lengths', prefillChunkTokens: 12 }))
    const runner = new ScriptedRunner()
    const a = seq(3, 6)
    sched.add(a.s)
    let plan = sched.schedule(0)
    deliver(sched.update(plan, await runner.step(plan)))
    const d = seq(4, 3)
    sched.add(d.s)
    plan = sched.schedule(0)
    expect(plan.prefill.map((p) => p.seqId)).toEqual([d.s.seqId])
    deliver(sched.update(plan, await runner.step(plan)))
    expect(runner.rows.map((r) => r.len)).toEqual([4, 4])
  })

  it("with 'alone' batching, runs one sequence at a time, whatever the lengths", async () => {
    const sched = new Scheduler(limits({ batching: 'alone', prefillChunkTokens: 12 }))
    const runner = new ScriptedRunner()
    const all = [seq(3, 3), seq(3, 3), seq(2, 3)]
    for (const x of all) sched.add(x.s)
    for (let tick = 0; tick < 100 && sched.hasWork; tick++) {
      const plan = sched.schedule(0)
      expect(plan.prefill.length).toBeLessThanOrEqual(1)
      deliver(sched.update(plan, await runner.step(plan)))
      // After the step's releases and joins, the batch holds one row at most.
      expect(runner.rows.length).toBeLessThanOrEqual(1)
    }
    for (const x of all) expect(x.events.at(-1)).toMatchObject({ type: 'finish', reason: 'length' })
  })

  it('static batching (the benchmark baseline) waits for a full batch, and admits nobody until it drains', async () => {
    const sched = new Scheduler(limits({ prefillChunkTokens: 64 }), {}, staticBatching(3, 1000))
    const runner = new ScriptedRunner()
    const a = seq(2, 4)
    const b = seq(2, 4)
    sched.add(a.s)
    sched.add(b.s)
    expect(sched.schedule(0).prefill).toEqual([])
    const c = seq(2, 4)
    sched.add(c.s)
    let plan = sched.schedule(0)
    expect(plan.prefill).toHaveLength(3)
    deliver(sched.update(plan, await runner.step(plan)))
    const late = seq(2, 4)
    sched.add(late.s)
    while (sched.running.length > 0) {
      plan = sched.schedule(10)
      expect(plan.prefill).toEqual([])
      deliver(sched.update(plan, await runner.step(plan)))
    }
    // Drained; the late one is alone and starts once it has waited the maximum.
    expect(sched.schedule(500).prefill).toEqual([])
    expect(sched.schedule(late.s.arrivalMs + 1000).prefill.map((p) => p.seqId)).toEqual([late.s.seqId])
  })
})
