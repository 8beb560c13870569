import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../engine/engine.ts'
import { GREEDY, type EngineEvent, type EngineLimits, type EngineRequest, type Usage } from '../engine/types.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { batchCouplingOps } from './graph-ops.ts'
import { readModelDir, type ModelDir } from './model-dir.ts'
import { ModelStep } from './model-step.ts'
import { toModelInfo, type ModelInfo, type ModelRunner, type StepPlan } from './runner.ts'
import { openModelSession } from './open-session.ts'
import { readSessionIo, type SessionIo } from './session-io.ts'
import { KvBufferSet, type BufferContents } from './kv-buffer-set.ts'
import type { KvArray } from './tensor-dtype.ts'
import { ModelTokenizer } from './tokenizer.ts'
import { InProcessRunner } from '../../test/support/in-process-runner.ts'

/**
 * The prefix cache never changes a token: greedy and seeded requests give the same tokens with
 * the cache as with PREFIX_CACHE_MB=0 — alone, batched, concurrently with requests sharing the
 * same prefix, after evictions, for prompts whose shared part ends mid-block, for follow-up
 * turns whose prompt holds the previous answer (generated blocks), and for one-block prompts
 * whose block is cached but not reused (taking buffers that held another prompt's block) — on
 * both KV layouts (slot, concat) and both position schemes (learned: tiny; RoPE: tiny-llama, and
 * the trained zl-code). The controls save each block one token off (a wrong position), hand a
 * prefill another block's KV (a stale block), or zero kept buffers under their record (a stale
 * row): each must change tokens, so the test can fail.
 */
const BLOCK = 8
const CHUNK = 16

type Rewrite = (plan: StepPlan) => StepPlan

async function engineFor(dir: ModelDir, prefixCacheBlocks: number, rewrite?: Rewrite, budget?: { tokens: number; onPreempted: () => void }, buffers?: (io: SessionIo) => KvBufferSet): Promise<Engine> {
  // As a node opens it: an Optimum graph (zl-code) gets the slot KV edit; the copies generated on
  // the concat path here stay on it.
  const { session } = await openModelSession(dir.onnxPath, ONE_THREAD, { config: dir.config, slotKvEdit: !dir.onnxPath.startsWith(root) })
  const io = readSessionIo(session, dir.config)
  const info = toModelInfo(dir, { ...io, couplingOps: batchCouplingOps(dir.onnxPath) })
  const kvBudgetBytes = budget ? budget.tokens * info.kvBytesPerToken : 1 << 30
  const limits: EngineLimits = { maxBatch: 16, maxQueue: 64, kvBudgetBytes, prefillChunkTokens: CHUNK, prefixCacheBytes: prefixCacheBlocks * BLOCK * info.kvBytesPerToken, prefixBlockTokens: BLOCK }
  const model = new ModelStep(session, io, info.eosTokenIds, { kvBudgetBytes: limits.kvBudgetBytes, prefixBlockTokens: BLOCK, ...(buffers ? { buffers: buffers(io) } : {}) })
  return new Engine({ runner: new InProcessRunner(info, model, rewrite), decoder: new ModelTokenizer(dir), limits, modelKey: dir.modelId, ...(budget ? { observer: { onPreempted: budget.onPreempted } } : {}) })
}

interface Outcome {
  text: string
  tokens: number
  usage: Usage
}

function run(engine: Engine, req: EngineRequest): Promise<Outcome> {
  let text = ''
  return new Promise((resolve, reject) => {
    const r = engine.submit(req, (e: EngineEvent) => {
      if (e.type === 'text') text += e.text
      else if (e.error) reject(new Error(`${req.id}: ${e.error.code}`))
      else resolve({ text, tokens: e.usage.completionTokens, usage: e.usage })
    })
    if (!r.ok) reject(new Error(r.code))
  })
}

/** Conversations sharing a system prompt of 43 tokens (ends mid-block), a user turn each, then a follow-up that resends it all with the answer. */
function conversation(tok: ModelTokenizer) {
  const system = tok.encodeText('You are zerolayer, a helpful assistant that answers briefly and exactly. Rules: be kind.').slice(0, 43)
  const users = ['What is the capital of France?', 'Count to five', 'Tell me a story about a fox', 'Why is the sky blue at noon?', 'ok', 'Summarise: tokens in, tokens out']
  const sampling = (i: number) => (i % 3 === 2 ? { ...GREEDY, temperature: 0.9, topP: 0.95, seed: 11 + i } : GREEDY)
  const first = users.map((u, i): EngineRequest => ({ id: `t1-${i}`, promptTokens: [...system, ...tok.encodeText(u)], maxTokens: 9 + (i % 4) * 5, stop: [], sampling: sampling(i), priority: 0, ignoreEos: true }))
  const second = (answers: string[]) =>
    first.map((r, i): EngineRequest => ({ ...r, id: `t2-${i}`, promptTokens: [...r.promptTokens, ...tok.encodeText(answers[i]!), ...tok.encodeText(' And then?')], maxTokens: 7 }))
  return { first, second }
}

/** Both turns: turn 1 all at once (sharing the system prompt), turn 2 all at once (each holding its own turn 1). */
async function twoTurns(engine: Engine, dir: ModelDir, together: boolean) {
  const { first, second } = conversation(new ModelTokenizer(dir))
  const each = (reqs: EngineRequest[]) => (together ? Promise.all(reqs.map((r) => run(engine, r))) : sequential(engine, reqs))
  const one = await each(first)
  const two = await each(second(one.map((o) => o.text)))
  return { one, two }
}

async function sequential(engine: Engine, reqs: EngineRequest[]): Promise<Outcome[]> {
  const out: Outcome[] = []
  for (const r of reqs) out.push(await run(engine, r))
  return out
}

/**
 * Prompts of exactly one block, one at a time: such a prompt reuses nothing (its last token is
 * computed), yet its block may be cached already, and is then held, not saved. Each request takes
 * the buffers the last one let go. Q, P, Q again, then P continued: the last one's cached block
 * is P's, while the buffers it is given last held Q's tokens.
 */
async function oneBlockPrompts(engine: Engine, dir: ModelDir): Promise<string[]> {
  const tok = new ModelTokenizer(dir)
  const q = tok.encodeText('Question: what do foxes eat in the winter, and why?').slice(0, BLOCK)
  const p = tok.encodeText('Poem: the river runs under the old stone bridge tonight').slice(0, BLOCK)
  const req = (id: string, promptTokens: readonly number[]): EngineRequest => ({ id, promptTokens: [...promptTokens], maxTokens: 3, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true })
  const texts: string[] = []
  for (const [id, prompt] of [['q', q], ['p', p], ['q-again', q], ['p-continued', [...p, ...tok.encodeText(' and the moon').slice(0, 4)]]] as const) texts.push((await run(engine, req(id, prompt))).text)
  return texts
}

/** Tokens of `p` a cache holding `q` serves: their common prefix in whole blocks, short of `p`'s last token. */
function sharedBlocks(p: readonly number[], q: readonly number[]): number {
  let n = 0
  while (n < p.length - 1 && n < q.length && p[n] === q[n]) n++
  return Math.floor(n / BLOCK) * BLOCK
}

const texts = (r: { one: Outcome[]; two: Outcome[] }) => [...r.one, ...r.two].map((o) => o.text)
const cached = (os: Outcome[]) => os.map((o) => o.usage.cachedTokens ?? 0)

const root = mkdtempSync(join(tmpdir(), 'zerolayer-prefix-'))
beforeAll(async () => {
  for (const preset of ['tiny', 'tiny-llama'] as const) await generateModel({ preset, outDir: join(root, preset), seed: 42, kvCache: 'concat' })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

const MODELS = [
  ['tiny', 'slots', 'models/tiny'],
  ['tiny-llama', 'slots', 'models/tiny-llama'],
  // The trained default model: 4-bit MatMulNBits, RoPE, grouped KV heads.
  ['zl-code', 'slots', 'trained/zl-code'],
  ['tiny', 'concat', join(root, 'tiny')],
  ['tiny-llama', 'concat', join(root, 'tiny-llama')],
] as const

for (const [preset, kv, path] of MODELS) {
  describe(`the prefix cache on ${preset} (${kv} KV)`, () => {
    let dir: ModelDir
    let reference: string[]
    beforeAll(async () => {
      dir = readModelDir(path)
      // PREFIX_CACHE_MB=0, every request alone.
      reference = texts(await twoTurns(await engineFor(dir, 0), dir, false))
    }, 60_000)

    it('gives the tokens of a run without it, one request at a time, and reports what it reused', async () => {
      const r = await twoTurns(await engineFor(dir, 4096), dir, false)
      expect(texts(r)).toEqual(reference)
      // Turn 1: after the first, each reuses the whole blocks it shares with an earlier prompt (the
      // system prompt's, for tiny 5 blocks: 40 of its 43 tokens).
      const prompts = conversation(new ModelTokenizer(dir)).first.map((q) => q.promptTokens)
      expect(cached(r.one)).toEqual(prompts.map((p, i) => Math.max(0, ...prompts.slice(0, i).map((q) => sharedBlocks(p, q)))))
      if (preset === 'tiny') expect(cached(r.one)).toEqual([0, 40, 40, 40, 40, 40])
      // Turn 2 reuses its own turn 1, generated tokens included, to the last whole block before its last token.
      r.two.forEach((o, i) => expect(o.usage.cachedTokens).toBeGreaterThan(r.one[i]!.usage.promptTokens - BLOCK))
      expect(r.one[0]!.usage.cacheCreationTokens).toBe(Math.floor(r.one[0]!.usage.promptTokens / BLOCK) * BLOCK)
    })

    it('gives the same tokens to one-block prompts whose block is cached but not reused', async () => {
      const reference = await oneBlockPrompts(await engineFor(dir, 0), dir)
      expect(await oneBlockPrompts(await engineFor(dir, 4096), dir)).toEqual(reference)
    })

    it('gives the same tokens with all requests of a turn batched together', async () => {
      const r = await twoTurns(await engineFor(dir, 4096), dir, true)
      expect(texts(r)).toEqual(reference)
      expect(cached(r.two).every((c) => c > 0)).toBe(true)
    })

    it('gives the same tokens when a small cache evicts between and within turns', async () => {
      const engine = await engineFor(dir, 12)
      const r = await twoTurns(engine, dir, true)
      expect(texts(r)).toEqual(reference)
      expect(engine.stats().prefixCache?.evictions).toBeGreaterThan(0)
    })

    it('gives the same tokens under a KV budget that preempts (a recomputed sequence reuses its blocks)', async () => {
      let preempted = 0
      const engine = await engineFor(dir, 4096, undefined, { tokens: 130, onPreempted: () => preempted++ })
      expect(texts(await twoTurns(engine, dir, true))).toEqual(reference)
      expect(preempted).toBeGreaterThan(0)
    })
  })
}

describe('the exactness test can fail (controls, tiny slots)', () => {
  let dir: ModelDir
  let reference: string[]
  beforeAll(async () => {
    dir = readModelDir('models/tiny')
    reference = texts(await twoTurns(await engineFor(dir, 0), dir, false))
  }, 60_000)

  it('catches blocks saved one token off (a wrong position)', async () => {
    const offByOne: Rewrite = (plan) => (plan.save ? { ...plan, save: plan.save.map((s) => ({ ...s, from: Math.max(0, s.from - 1) })) } : plan)
    expect(texts(await twoTurns(await engineFor(dir, 4096, offByOne), dir, false))).not.toEqual(reference)
  })

  it('catches a restore that trusts kept buffers whose K/V changed (a stale row)', async () => {
    // Every buffer an emptied batch lets go is zeroed after it is kept, its record untouched: a
    // next turn that finds its blocks "in place" then attends over zeros. Sequential turns take
    // the last request's buffers, so this must change texts; a restore that wrote every block
    // would not notice.
    class Zeroing extends KvBufferSet {
      override keep(arrays: readonly KvArray[], contents?: BufferContents): void {
        super.keep(arrays, contents)
        for (const a of arrays) a.fill(0)
      }
    }
    expect(texts(await twoTurns(await engineFor(dir, 4096, undefined, undefined, (io) => new Zeroing(io.kvType)), dir, false))).not.toEqual(reference)
  })

  it('catches a prefill handed another block’s KV (a stale block)', async () => {
    const stale: Rewrite = (plan) => ({ ...plan, prefill: plan.prefill.map((p) => (p.start?.prefix?.length ? { ...p, start: { ...p.start, prefix: p.start.prefix.map((s, i, all) => all[Math.max(0, i - 1)]!) } } : p)) })
    expect(texts(await twoTurns(await engineFor(dir, 4096, stale), dir, false))).not.toEqual(reference)
  })
})
