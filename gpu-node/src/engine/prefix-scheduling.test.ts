import { describe, expect, it } from 'vitest'
import { Scheduler, type SchedulerLimits } from './scheduler.ts'
import { FED_PADDING_TOKENS, mayFeed } from './shared-row.ts'
import { letterDecoder, ScriptedRunner } from '../../test/support/scripted-runner.ts'
import { Sequence } from './sequence.ts'
import { GREEDY, type EngineEvent, type RequestEvent } from './types.ts'
import type { StepPlan } from '../model/runner.ts'

/**
 * The scheduler's side of the prefix cache, without a model (ScriptedRunner): what is reused,
 * what is saved and when, and that holds are given back on every way out (finish, abort,
 * preemption). Blocks of 4 tokens, 8 bytes a token.
 */
const B = 4
const BYTES_PER_TOKEN = 8

function limits(over: Partial<SchedulerLimits> = {}): SchedulerLimits {
  return { maxBatch: 8, maxQueue: 64, kvBudgetBytes: 1 << 30, kvBytesPerToken: BYTES_PER_TOKEN, prefillChunkTokens: 64, prefixCacheBytes: 64 * B * BYTES_PER_TOKEN, prefixBlockTokens: B, ...over }
}

let nextId = 1
const inbox = new Map<string, EngineEvent[]>()
function deliver(events: readonly RequestEvent[]): void {
  for (const { id, event } of events) inbox.get(id)?.push(event)
}

function seq(prompt: number[], maxTokens: number, priority = 0, cacheSalt?: string): Sequence {
  const id = nextId++
  const req = { id: `p${id}`, promptTokens: prompt, maxTokens, stop: [], sampling: GREEDY, priority, ...(cacheSalt ? { cacheSalt } : {}) }
  inbox.set(req.id, [])
  return new Sequence(id, id, req, letterDecoder, [0], 0)
}

const finishOf = (s: Sequence) => inbox.get(s.req.id)!.find((e) => e.type === 'finish')
const textOf = (s: Sequence) => inbox.get(s.req.id)!.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('')
const range = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + (i % 20))

async function drive(sched: Scheduler, runner: ScriptedRunner, maxTicks = 1000): Promise<StepPlan[]> {
  const plans: StepPlan[] = []
  for (let tick = 0; tick < maxTicks && sched.hasWork; tick++) {
    const plan = sched.schedule(0)
    plans.push(structuredClone(plan))
    deliver(sched.update(plan, await runner.step(plan)))
  }
  return plans
}

describe('prefix reuse in the scheduler', () => {
  it('starts a prompt after its cached blocks, with their slots, prefilling it alone', async () => {
    const sched = new Scheduler(limits())
    const runner = new ScriptedRunner({}, undefined, B)
    const system = range(10)
    const a = seq([...system, 21, 22], 3)
    sched.add(a)
    await drive(sched, runner)
    const b = seq([...system, 23], 3)
    const c = seq(range(5, 30), 3)
    sched.add(b)
    sched.add(c)
    const plans = await drive(sched, runner)
    const first = plans.find((p) => p.prefill.length > 0)!
    // b's 11 tokens: 2 whole blocks of the system prompt reused (8 tokens), 3 computed, alone in its tick.
    expect(first.prefill).toEqual([expect.objectContaining({ seqId: b.seqId, tokens: [...system.slice(8), 23], last: true })])
    expect(first.prefill[0]!.start!.prefix).toHaveLength(2)
    expect(finishOf(b)).toMatchObject({ usage: { promptTokens: 11, cachedTokens: 8, cacheCreationTokens: 0 } })
    expect(finishOf(a)).toMatchObject({ usage: { promptTokens: 12, cachedTokens: 0, cacheCreationTokens: 12 } })
    expect(sched.prefix!.stats).toMatchObject({ queries: 12 + 11 + 5, hits: 8 })
  })

  it('lets prompts that continue cached prefixes share a tick, their rests within the chunk', async () => {
    const sched = new Scheduler(limits({ prefillChunkTokens: 2 }))
    const runner = new ScriptedRunner({}, undefined, B)
    const system = range(12)
    sched.add(seq([...system, 21], 2))
    await drive(sched, runner)
    const [b, c, d] = [seq([...system, 22, 23], 2), seq([...system, 24, 25, 26], 2), seq([...system, 27, 28, 29, 30], 2)]
    for (const s of [b, c, d]) sched.add(s)
    const plans = await drive(sched, runner)
    // 12 system tokens cached (3 blocks): rests of 2, 3 and 4 tokens. Three waiting, none
    // decoding: a chunk of 3 × 2 tokens, which two rows padded to 3 fill (they run as one ragged
    // batch); three padded to 4 would not. The 4 waits, then comes beside two decoding rows in
    // chunks of 2.
    const ticks = plans.filter((p) => p.prefill.length > 0).map((p) => p.prefill.map((x) => [x.seqId, x.tokens.length, x.start?.prefix?.length]))
    expect(ticks).toEqual([[[b.seqId, 2, 3], [c.seqId, 3, 3]], [[d.seqId, 2, 3]], [[d.seqId, 2, undefined]]])
    expect([b, c, d].map((s) => finishOf(s))).toMatchObject([{ reason: 'length' }, { reason: 'length' }, { reason: 'length' }])
  })

  it('saves each complete block once, prompt and generated, the last ones in the plan that releases the sequence', async () => {
    const sched = new Scheduler(limits())
    const runner = new ScriptedRunner({}, undefined, B)
    const a = seq(range(6), 7) // 6 prompt + 7 generated: KV of 12 tokens (the last sampled is never fed)
    sched.add(a)
    const plans = await drive(sched, runner)
    const saves = plans.flatMap((p) => p.save ?? [])
    expect(saves.map((s) => s.from)).toEqual([0, 4, 8])
    expect(new Set(saves.map((s) => s.slot)).size).toBe(3)
    const releasing = plans.find((p) => p.release.includes(a.seqId))!
    expect(releasing.save?.map((s) => s.from)).toEqual([8])
    // Nothing is held once it has left: every block can be evicted.
    expect(sched.prefix!.blocks).toBe(3)
    const again = seq(a.tokens.slice(), 1)
    expect(a.tokens).toHaveLength(13)
    sched.add(again)
    await drive(sched, runner)
    expect(finishOf(again)).toMatchObject({ usage: { cachedTokens: 12 } })
  })

  it('gives an aborted prefilling sequence’s blocks back', async () => {
    const sched = new Scheduler(limits({ prefixCacheBytes: 3 * B * BYTES_PER_TOKEN, prefillChunkTokens: 4 }))
    const runner = new ScriptedRunner({}, undefined, B)
    const a = seq(range(12), 1)
    sched.add(a)
    await drive(sched, runner) // 3 blocks cached: the cache is full
    const b = seq([...range(12), 5, 6, 7, 8, 9], 2)
    sched.add(b)
    const plan = sched.schedule(0)
    expect(plan.prefill[0]!.start!.prefix).toHaveLength(3)
    sched.cancel(b, 'abort')
    deliver(sched.update(plan, await runner.step(plan)))
    await drive(sched, runner)
    // Were b's holds kept, the cache (3 blocks, all b's) could take no new block.
    const c = seq(range(8, 40), 1)
    sched.add(c)
    const plans = await drive(sched, runner)
    expect(plans.flatMap((p) => p.save ?? []).map((s) => s.from)).toEqual([0, 4])
  })

  it('re-admits a preempted sequence from its own saved blocks, generated ones included', async () => {
    // Budget: two sequences of ~12 tokens; growth preempts the later one.
    const sched = new Scheduler(limits({ kvBudgetBytes: 26 * BYTES_PER_TOKEN }))
    const runner = new ScriptedRunner({}, undefined, B)
    const first = seq(range(6), 8)
    const second = seq(range(6, 50), 8)
    sched.add(first)
    sched.add(second)
    const plans = await drive(sched, runner)
    const starts = plans.flatMap((p) => p.prefill.filter((part) => part.seqId === second.seqId && part.start))
    expect(starts.length).toBeGreaterThan(1) // prefilled, preempted, prefilled again
    expect(starts.at(-1)!.start!.prefix!.length).toBeGreaterThan(1) // the recompute reused more than the prompt's one block
    expect(finishOf(second)).toMatchObject({ reason: 'length', usage: { completionTokens: 8, cachedTokens: 0 } })
  })

  it('caches nothing new while running sequences hold every block, and still serves them', async () => {
    const sched = new Scheduler(limits({ prefixCacheBytes: 2 * B * BYTES_PER_TOKEN }))
    const runner = new ScriptedRunner({}, undefined, B)
    const a = seq(range(8), 6)
    const b = seq(range(8, 60), 10)
    sched.add(a)
    sched.add(b)
    const plans = await drive(sched, runner)
    const aLeaves = plans.findIndex((p) => p.release.includes(a.seqId))
    // a holds both blocks while it runs: b's are saved only once a has left (evicting a's).
    expect(plans.slice(0, aLeaves).flatMap((p) => p.save ?? []).map((x) => x.seqId)).toEqual([a.seqId, a.seqId])
    expect(plans.slice(aLeaves).flatMap((p) => p.save ?? []).every((x) => x.seqId === b.seqId)).toBe(true)
    expect(sched.prefix!.stats.evictions).toBeGreaterThan(0)
    expect([finishOf(a), finishOf(b)]).toMatchObject([{ reason: 'length' }, { reason: 'length' }])
  })

  it('is off with no budget for it: no saves, no prefixes', async () => {
    const sched = new Scheduler(limits({ prefixCacheBytes: 0 }))
    const runner = new ScriptedRunner({}, undefined, B)
    sched.add(seq(range(9), 5))
    sched.add(seq(range(9), 5))
    const plans = await drive(sched, runner)
    expect(sched.prefix).toBeUndefined()
    expect(plans.some((p) => p.save || p.prefill.some((x) => x.start?.prefix))).toBe(false)
  })
})

describe('a prompt continuing a batch row in the scheduler', () => {
  const system = range(10)

  /** One tick: its plan (a copy, as the runner got it) applied. */
  async function tick(sched: Scheduler, runner: ScriptedRunner): Promise<StepPlan> {
    const plan = structuredClone(sched.schedule(0))
    deliver(sched.update(plan, await runner.step(plan)))
    return plan
  }

  /** A scheduler on which a ([...system, 21], of `priority`) runs and has decoded a token. */
  async function withRunningRow(priority: number, over: Partial<SchedulerLimits> = {}) {
    const sched = new Scheduler(limits({ raggedDecode: true, ...over }))
    const runner = new ScriptedRunner({}, undefined, B)
    const a = seq([...system, 21], 20, priority)
    sched.add(a)
    for (let i = 0; i < 2; i++) await tick(sched, runner)
    return { sched, runner, a }
  }

  /** a runs and has decoded a token; then `next` arrives, a first cancelled when `supersede`. The plan of the tick after. */
  async function keystroke(next: number[], opts: { supersede: boolean; ragged?: boolean; salt?: string }) {
    const { sched, runner, a } = await withRunningRow(0, { raggedDecode: opts.ragged ?? true })
    const b = seq(next, 3, 0, opts.salt)
    sched.add(b)
    if (opts.supersede) sched.cancel(a, 'abort')
    const plan = await tick(sched, runner)
    await drive(sched, runner)
    return { a, b, plan, sched }
  }

  /** `prompt`'s text on a scheduler without the prefix cache. */
  async function alone(prompt: number[]): Promise<string> {
    const sched = new Scheduler(limits({ prefixCacheBytes: 0 }))
    const s = seq(prompt, 3)
    sched.add(s)
    await drive(sched, new ScriptedRunner({}, undefined, B))
    return textOf(s)
  }

  it('takes over the row its predecessor leaves in the same tick: cut to their shared tokens, the rest fed by the decode step', async () => {
    const next = [...system, 21, 22]
    const { a, b, plan, sched } = await keystroke(next, { supersede: true })
    // 11 shared tokens (a's prompt), past the 2 whole blocks the cache has; 1 left to feed.
    expect(plan.takeover).toEqual([expect.objectContaining({ from: a.seqId, seqId: b.seqId, keep: 11, tokens: [22] })])
    expect(plan.release).not.toContain(a.seqId)
    expect(plan.decode).toBe(true)
    expect(plan.prefill).toEqual([])
    expect(finishOf(b)).toMatchObject({ reason: 'length', usage: { promptTokens: 12, cachedTokens: 11 } })
    expect(textOf(b)).toBe(await alone(next))
    expect(sched.prefix!.stats).toMatchObject({ hits: 11 })
  })

  it('restores a copy of a running row as a new row, the rest fed by the decode step', async () => {
    const next = [...system, 21, 22]
    const { a, b, plan } = await keystroke(next, { supersede: false })
    expect(plan.takeover).toBeUndefined()
    expect(plan.restore).toEqual([expect.objectContaining({ seqId: b.seqId, donor: { seqId: a.seqId, tokens: 11 }, tokens: [22] })])
    expect(plan.decode).toBe(true)
    expect(plan.prefill).toEqual([])
    expect(finishOf(b)).toMatchObject({ usage: { promptTokens: 12, cachedTokens: 11 } })
    expect(textOf(b)).toBe(await alone(next))
  })

  it('restores a new row from cached blocks when no row shares more', async () => {
    // b shares a's first two blocks and nothing after them: the cache's blocks, not a's row.
    const next = [...system.slice(0, 2 * B), 50, 51]
    const { b, plan } = await keystroke(next, { supersede: false })
    expect(plan.restore).toEqual([expect.objectContaining({ seqId: b.seqId, prefix: [expect.any(Number), expect.any(Number)], tokens: [50, 51] })])
    expect(plan.restore![0]).not.toHaveProperty('donor')
    expect(plan.prefill).toEqual([])
    expect(textOf(b)).toBe(await alone(next))
  })

  it('prefills, ahead of the batch rows, an interactive prompt it would otherwise restore beside them', async () => {
    const { sched, runner } = await withRunningRow(1000)
    const next = [...system.slice(0, 2 * B), 50, 51]
    const interactive = seq(next, 3, 0)
    sched.add(interactive)
    const plan = await tick(sched, runner)
    await drive(sched, runner)
    expect(plan.restore).toBeUndefined()
    expect(plan.decode).toBe(false)
    expect(plan.prefill).toEqual([expect.objectContaining({ seqId: interactive.seqId, tokens: [50, 51], start: expect.objectContaining({ prefix: [expect.any(Number), expect.any(Number)] }) })])
    expect(textOf(interactive)).toBe(await alone(next))
  })

  for (const order of ['a continued batch prompt first', 'a fresh batch prompt first']) {
    it(`neither feeds nor prefills a batch prompt beside an interactive one prefilled ahead of the batch rows (${order})`, async () => {
      const { sched, runner } = await withRunningRow(1000)
      // The queue's order is priority, then arrival: the interactive prompt, then the batch ones as made.
      const next = [...system.slice(0, 2 * B), 50, 51]
      const prompts = { more: next, fresh: range(5, 80) }
      const made = (order.startsWith('a continued') ? (['more', 'fresh'] as const) : (['fresh', 'more'] as const)).map((k) => [k, seq(prompts[k], 3, 1000)] as const)
      const { more, fresh } = Object.fromEntries(made) as Record<'more' | 'fresh', Sequence>
      const interactive = seq(range(6, 60), 3, 0)
      for (const s of [more, fresh, interactive]) sched.add(s)
      const plan = await tick(sched, runner)
      await drive(sched, runner)
      expect(plan.decode).toBe(false)
      expect(plan.restore).toBeUndefined()
      expect(plan.prefill.map((p) => p.seqId)).toEqual([interactive.seqId])
      expect(textOf(more)).toBe(await alone(next))
      expect(textOf(fresh)).toBe(await alone(range(5, 80)))
    })
  }

  it("takes no step cost for speculative decoding from a step that fed a prompt: it costs the prompt's tokens", async () => {
    const sched = new Scheduler(limits({ raggedDecode: true, speculation: { mode: 'auto', maxDraft: 4 } }))
    const runner = new ScriptedRunner({}, undefined, B)
    const a = seq([...system, 21], 20)
    sched.add(a)
    const plain: Array<number | undefined> = []
    for (let i = 0; i < 3; i++) {
      const plan = sched.schedule(0)
      deliver(sched.update(plan, { ...(await runner.step(plan)), decodeMs: 10 }))
      plain.push(sched.speculation!.costs.plain(1))
    }
    const b = seq([...system.slice(0, 2 * B), 50, 51, 52, 53], 3)
    sched.add(b)
    const plan = sched.schedule(0)
    expect(plan.restore).toHaveLength(1)
    deliver(sched.update(plan, { ...(await runner.step(plan)), decodeMs: 500 }))
    expect(plain.at(-1)).toBe(10)
    // The step's rows: a (decoding, perhaps verifying a draft) and b (fed): nothing measured for two rows.
    expect(sched.speculation!.costs.plain(2)).toBeUndefined()
    expect(sched.speculation!.costs.measured(2)).toBe(false)
    expect(sched.speculation!.costs.plain(1)).toBe(10)
  })

  it('prefills a rest too wide to ride on the decode step, from a copy of the row', async () => {
    // Beside a's row (one token a step), a rest of 33 would pad the step past the 64-token chunk.
    const wide = [...system, 21, ...range(33, 100)]
    const running = await keystroke(wide, { supersede: false })
    expect(running.plan.restore).toBeUndefined()
    expect(running.plan.prefill[0]!.start!.donor).toEqual({ seqId: running.a.seqId, tokens: 11 })
    expect(textOf(running.b)).toBe(await alone(wide))
    // Alone in the step (its predecessor left), a rest runs there up to a whole chunk; past it, a prefill.
    const long = [...system, 21, ...range(65, 100)]
    const longRest = await keystroke(long, { supersede: true })
    expect(longRest.plan.takeover).toBeUndefined()
    expect(longRest.plan.release).toContain(longRest.a.seqId)
    expect(longRest.plan.prefill[0]!.start!.donor).toEqual({ seqId: longRest.a.seqId, tokens: 11 })
    expect(textOf(longRest.b)).toBe(await alone(long))
  })

  it('takes over no row where the decode step feeds one token a row (the concat KV path): it copies it', async () => {
    const { a, plan } = await keystroke([...system, 21, 22], { supersede: true, ragged: false })
    expect(plan.takeover).toBeUndefined()
    expect(plan.prefill[0]!.start!.donor).toEqual({ seqId: a.seqId, tokens: 11 })
  })

  it("never continues another tenant's row, nor shares fewer tokens than a block", async () => {
    const other = await keystroke([...system, 21, 22], { supersede: true, salt: 'another tenant' })
    expect(other.plan.takeover).toBeUndefined()
    expect(other.plan.prefill[0]!.start!.donor).toBeUndefined()
    const short = await keystroke([...system.slice(0, B - 1), 40, 41], { supersede: true })
    expect(short.plan.takeover).toBeUndefined()
    expect(short.plan.prefill[0]!.start).not.toHaveProperty('donor')
  })
})

describe('which prompts ride on the decode step (mayFeed)', () => {
  it('feeds up to 4 tokens beside 15 plain rows, more into a small batch, and never past the chunk', () => {
    expect(FED_PADDING_TOKENS).toBe(48)
    expect(mayFeed(15, [], 4, 128)).toBe(true)
    expect(mayFeed(15, [], 5, 128)).toBe(false)
    expect(mayFeed(1, [], 5, 128)).toBe(true)
    // Keystrokes arriving together share the width they pad to.
    expect(mayFeed(1, Array(14).fill(5), 5, 128)).toBe(true)
    expect(mayFeed(1, Array(14).fill(5), 2, 128)).toBe(true)
    expect(mayFeed(0, [], 64, 64)).toBe(true)
    expect(mayFeed(0, [], 65, 64)).toBe(false)
  })
})
