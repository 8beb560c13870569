import { describe, expect, it } from 'vitest'
import { Engine } from './engine.ts'
import { letterDecoder, ScriptedRunner } from '../../test/support/scripted-runner.ts'
import { GREEDY, type EngineEvent, type EngineObserver, type EngineRequest } from './types.ts'

function request(id: string, over: Partial<EngineRequest> = {}): EngineRequest {
  return { id, promptTokens: [1, 2, 3], maxTokens: 8, stop: [], sampling: GREEDY, priority: 0, ...over }
}

/** Submits and collects the request's events; resolves at its finish. */
function run(engine: Engine, req: EngineRequest) {
  const events: EngineEvent[] = []
  let submitted: ReturnType<Engine['submit']> | undefined
  const done = new Promise<{ text: string; finish: Extract<EngineEvent, { type: 'finish' }> }>((resolve) => {
    submitted = engine.submit(req, (e) => {
      events.push(e)
      if (e.type === 'finish') resolve({ text: events.flatMap((x) => (x.type === 'text' ? [x.text] : [])).join(''), finish: e })
    })
  })
  return { events, done, submitted: submitted! }
}

function engineWith(runner: ScriptedRunner, limits: Partial<ConstructorParameters<typeof Engine>[0]['limits']> = {}, observer?: EngineObserver) {
  return new Engine({ runner, decoder: letterDecoder, limits: { maxBatch: 8, maxQueue: 64, kvBudgetBytes: 1 << 30, prefillChunkTokens: 4, ...limits }, ...(observer ? { observer } : {}) })
}

/** What a sequence produces alone: the reference for every batched run. */
async function alone(req: EngineRequest): Promise<string> {
  const engine = engineWith(new ScriptedRunner())
  const { done } = run(engine, req)
  const out = await done
  await engine.close()
  return out.text
}

describe('Engine', () => {
  it('streams max_tokens tokens and finishes with length', async () => {
    const engine = engineWith(new ScriptedRunner())
    const { done, events } = run(engine, request('a', { maxTokens: 5 }))
    const out = await done
    expect(out.finish.reason).toBe('length')
    expect(out.finish.usage).toEqual({ promptTokens: 3, completionTokens: 5, cachedTokens: 0, cacheCreationTokens: 0 })
    expect(out.text).toHaveLength(5)
    expect(events.at(-1)?.type).toBe('finish')
    await engine.close()
  })

  it('gives each of many concurrent sequences the same text it gets alone', async () => {
    const runner = new ScriptedRunner()
    const engine = engineWith(runner, { maxBatch: 4 })
    const reqs = Array.from({ length: 10 }, (_, i) => request(`r${i}`, { promptTokens: Array.from({ length: 1 + i * 3 }, (_, j) => 1 + (j % 20)), maxTokens: 3 + i }))
    const outs = await Promise.all(reqs.map((r) => run(engine, r).done))
    for (let i = 0; i < reqs.length; i++) expect(outs[i].text).toBe(await alone(reqs[i]))
    expect(runner.plans.some((p) => p.decode && p.prefill)).toBe(true)
    expect(Math.max(...runner.plans.map((p) => (p.prefill ? 1 : 0)))).toBe(1)
    await engine.close()
  })

  it('stops on EOS without emitting it, and honours ignoreEos', async () => {
    const eosAt = (_key: number, len: number) => (len === 6 ? 0 : 5)
    const engine = engineWith(new ScriptedRunner({}, eosAt))
    const out = await run(engine, request('e', { maxTokens: 20 })).done
    expect(out.finish.reason).toBe('stop')
    expect(out.text).toBe('eee')
    const ignored = await run(engine, request('f', { maxTokens: 6, ignoreEos: true })).done
    expect(ignored.finish.reason).toBe('length')
    await engine.close()
  })

  it('cuts at a stop string split across tokens and never streams its prefix', async () => {
    // Tokens spell "abcabc…"; stop "ca" spans two tokens.
    const engine = engineWith(new ScriptedRunner({}, (_s, len) => 1 + ((len - 3) % 3)))
    const { done, events } = run(engine, request('s', { maxTokens: 20, stop: ['ca'] }))
    const out = await done
    expect(out.text).toBe('ab')
    expect(out.finish).toMatchObject({ reason: 'stop_sequence', stopSequence: 'ca' })
    expect(events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text).join('')).not.toContain('c')
    await engine.close()
  })

  it('refuses new work with overloaded when the queue is full, with a retry estimate', async () => {
    const runner = new ScriptedRunner()
    let open!: () => void
    runner.gate = new Promise((r) => (open = r))
    const engine = engineWith(runner, { maxQueue: 2, maxBatch: 1 })
    const first = run(engine, request('q0', { maxTokens: 50 }))
    await until(() => runner.plans.length === 1)
    const second = run(engine, request('q1'))
    const third = run(engine, request('q2'))
    const fourth = run(engine, request('q3'))
    expect([first.submitted.ok, second.submitted.ok, third.submitted.ok]).toEqual([true, true, true])
    expect(fourth.submitted).toMatchObject({ ok: false, code: 'overloaded' })
    if (!fourth.submitted.ok) expect(fourth.submitted.retryAfterMs).toBeGreaterThan(0)
    runner.gate = null
    open()
    await Promise.all([first.done, second.done, third.done])
    await engine.close()
  })

  it('refuses a request whose estimated wait exceeds maxQueueWaitMs, with retry-after until the queue is back under it; without the bound it queues', async () => {
    for (const maxQueueWaitMs of [250, 0]) {
      const runner = new ScriptedRunner()
      let open!: () => void
      runner.gate = new Promise((r) => (open = r))
      const engine = engineWith(runner, { maxBatch: 1, maxQueueWaitMs })
      const first = run(engine, request('w0', { maxTokens: 20 }))
      await until(() => runner.plans.length === 1)
      // No token rate measured yet: the estimate is 100 ms per queued request ahead, plus one.
      const queued = [run(engine, request('w1')), run(engine, request('w2'))]
      const over = run(engine, request('w3'))
      expect(queued.map((q) => q.submitted.ok)).toEqual([true, true])
      // The wait (300 ms) less the bound (250 ms), at least the estimate's 100 ms grain.
      if (maxQueueWaitMs > 0) expect(over.submitted).toEqual({ ok: false, code: 'overloaded', retryAfterMs: 100 })
      else expect(over.submitted.ok).toBe(true)
      runner.gate = null
      open()
      await Promise.all([first.done, ...queued.map((q) => q.done), ...(over.submitted.ok ? [over.done] : [])])
      await engine.close()
    }
  })

  it('frees an aborted sequence at the next step', async () => {
    const runner = new ScriptedRunner()
    const freed: number[] = []
    const engine = engineWith(runner, {}, { onAbortFreed: (_id, steps) => freed.push(steps) })
    const { done, events } = run(engine, request('x', { maxTokens: 1000 }))
    await new Promise<void>((resolve) => {
      const check = () => (events.some((e) => e.type === 'text') ? resolve() : setImmediate(check))
      check()
    })
    const stepsAtAbort = engine.steps
    engine.abort('x')
    const out = await done
    expect(out.finish.reason).toBe('abort')
    await until(() => engine.kvRows === 0)
    expect(engine.steps - stepsAtAbort).toBeLessThanOrEqual(2)
    expect(freed).toHaveLength(1)
    expect(freed[0]).toBeLessThanOrEqual(2)
    expect(engine.stats().running).toBe(0)
    await engine.close()
  })

  it('leaves zero running sequences and zero KV rows after 200 random aborts', async () => {
    const runner = new ScriptedRunner()
    const freed: number[] = []
    const engine = engineWith(runner, { maxBatch: 16, maxQueue: 256 }, { onAbortFreed: (_id, steps) => freed.push(steps) })
    let seed = 7
    const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
    const runs = Array.from({ length: 200 }, (_, i) => run(engine, request(`a${i}`, { maxTokens: 5 + Math.floor(rand() * 60), promptTokens: [1, 2, 3, 4, 5].slice(0, 1 + Math.floor(rand() * 5)) })))
    for (let i = 0; i < 200; i++) {
      if (rand() < 0.5) await new Promise((r) => setImmediate(r))
      engine.abort(`a${Math.floor(rand() * 200)}`)
    }
    const outs = await Promise.all(runs.map((r) => r.done))
    expect(outs.some((o) => o.finish.reason === 'abort')).toBe(true)
    expect(freed.length).toBeGreaterThan(0)
    expect(Math.max(...freed)).toBeLessThanOrEqual(2)
    await until(() => engine.kvRows === 0)
    expect(engine.stats()).toMatchObject({ running: 0, waiting: 0 })
    expect(runner.rows).toEqual([])
    await engine.close()
  })

  it('drain stops admitting and resolves when in-flight work finishes', async () => {
    const engine = engineWith(new ScriptedRunner())
    const inflight = run(engine, request('d', { maxTokens: 20 }))
    const drained = engine.drain()
    expect(engine.submit(request('late'), () => {})).toMatchObject({ ok: false, code: 'draining' })
    expect(engine.stats().draining).toBe(true)
    await drained
    expect((await inflight.done).finish.reason).toBe('length')
    await engine.close()
  })

  it('drops a queued request whose deadline passed before it could start', async () => {
    let now = 1000
    const runner = new ScriptedRunner()
    let open!: () => void
    runner.gate = new Promise((r) => (open = r))
    const engine = new Engine({ runner, decoder: letterDecoder, now: () => now, limits: { maxBatch: 1, maxQueue: 8, kvBudgetBytes: 1 << 30, prefillChunkTokens: 4 } })
    const first = run(engine, request('long', { maxTokens: 3 }))
    await until(() => runner.plans.length === 1)
    const late = run(engine, request('late', { deadlineMs: 1500 }))
    expect(late.submitted.ok).toBe(true)
    now = 2000
    runner.gate = null
    open()
    expect((await late.done).finish).toMatchObject({ reason: 'error', error: { code: 'deadline_exceeded' } })
    await first.done
    await engine.close()
  })
})

async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setImmediate(r))
}
