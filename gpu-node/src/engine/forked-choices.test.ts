/**
 * `n` choices on the real engine (tiny model): the other choices of a prompt join with the first
 * (forks), sampling their first tokens from its prefill and copying its KV, so the prompt is
 * computed once; each choice's tokens are exactly those of the same request run on its own
 * (greedy, seeded with a repetition penalty, grammar-constrained, on slot and concat KV). The
 * control: choices with different seeds differ, so equal texts are not a given.
 */
import * as ort from 'onnxruntime-node'
import { beforeAll, describe, expect, it } from 'vitest'
import { GREEDY, type OutputConstraint } from '../../../shared/src/generation.ts'
import { readModelDir, type ModelDir } from '../model/model-dir.ts'
import { ModelStep } from '../model/model-step.ts'
import { toModelInfo, type StepPlan } from '../model/runner.ts'
import { batchCouplingOps } from '../model/graph-ops.ts'
import { openModelSession } from '../model/open-session.ts'
import { readSessionIo } from '../model/session-io.ts'
import { ModelTokenizer } from '../model/tokenizer.ts'
import { Grammars } from '../structured/grammars.ts'
import { encodedVocab, tokenPieces } from '../structured/tokenizer-info.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { InProcessRunner } from '../../test/support/in-process-runner.ts'
import { Engine } from './engine.ts'
import type { EngineEvent, EngineRequest } from './types.ts'

function run(engine: Engine, req: EngineRequest): Promise<number[]> {
  const tokens: number[] = []
  return new Promise((resolve, reject) => {
    const r = engine.submit(req, (e: EngineEvent) => {
      if (e.type === 'text') tokens.push(...e.tokens)
      else if (e.error) reject(new Error(`${req.id}: ${e.error.code}`))
      else resolve(tokens)
    })
    if (!r.ok) reject(new Error(r.code))
  })
}

const ORDER: OutputConstraint = { kind: 'json_schema', schema: JSON.stringify({ type: 'object', properties: { item: { type: 'string', maxLength: 8 }, qty: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['item', 'qty'], additionalProperties: false }) }

describe('n choices forked from one prefill (tiny model)', () => {
  let dir: ModelDir
  let tok: ModelTokenizer
  beforeAll(() => {
    dir = readModelDir('models/tiny')
    tok = new ModelTokenizer(dir)
  })

  /** An engine with the prefix cache on, recording every plan's prefill. */
  async function engine(slotKvEdit: boolean, plans: StepPlan[], rewrite: (plan: StepPlan) => StepPlan = (p) => p): Promise<Engine> {
    const { session } = await openModelSession(dir.onnxPath, ONE_THREAD, { config: dir.config, slotKvEdit })
    const io = readSessionIo(session, dir.config)
    const info = toModelInfo(dir, { ...io, couplingOps: batchCouplingOps(dir.onnxPath) })
    const vocab = encodedVocab(dir.tokenizerJson, dir.config.vocabSize)
    const step = new ModelStep(session, io, info.eosTokenIds, { kvBudgetBytes: 1 << 30, grammars: new Grammars(vocab, dir.eosTokenIds), tokenPiece: tokenPieces(vocab), vocabSize: vocab.tokens.length })
    const runner = new InProcessRunner(info, step, (plan) => (plans.push(plan), rewrite(plan)))
    return new Engine({ runner, decoder: tok, limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes: 1 << 30, prefillChunkTokens: 64, prefixCacheBytes: 1 << 24 } })
  }

  const prompt = () => tok.encodeText('Once upon a time there was a harbour town where the boats came in every evening and')
  const choices = (id: string, base: Omit<EngineRequest, 'id' | 'promptTokens' | 'priority' | 'stop'>, n: number): EngineRequest[] =>
    Array.from({ length: n }, (_, i) => ({
      ...base,
      id: `${id}.${i}`,
      promptTokens: prompt(),
      stop: [],
      priority: 0,
      sampling: base.sampling.seed === undefined ? base.sampling : { ...base.sampling, seed: base.sampling.seed + i },
      ...(i > 0 ? { after: `${id}.0` } : {}),
    }))

  for (const slotKvEdit of [true, false]) {
    it(`each choice is its request run alone; the prompt is prefilled once (${slotKvEdit ? 'slot' : 'concat'} KV)`, async () => {
      const plans: StepPlan[] = []
      const e = await engine(slotKvEdit, plans)
      const cases = {
        greedy: { maxTokens: 24, sampling: GREEDY, ignoreEos: true },
        seeded: { maxTokens: 24, sampling: { ...GREEDY, temperature: 1, repetitionPenalty: 1.3, seed: 70 }, ignoreEos: true },
        constrained: { maxTokens: 80, sampling: { ...GREEDY, temperature: 1, seed: 9 }, constraint: ORDER },
      }
      for (const [name, base] of Object.entries(cases)) {
        const alone: number[][] = []
        // Each alone, with the prefix cache emptied of it by a different salt.
        for (const [i, r] of choices(`${name}-alone`, base, 4).entries()) alone.push(await run(e, { ...r, after: undefined, cacheSalt: `alone-${i}` }))
        plans.length = 0
        const together = await Promise.all(choices(name, base, 4).map((r) => run(e, { ...r, cacheSalt: name })))
        expect(together, name).toEqual(alone)
        // The prompt was computed once: one prefill carried the three other choices as forks.
        const prefilled = plans.flatMap((p) => p.prefill).reduce((n, p) => n + p.tokens.length, 0)
        expect(prefilled, name).toBe(prompt().length)
        expect(plans.flatMap((p) => p.prefill).flatMap((p) => p.forks ?? []).length, name).toBe(3)
        if (name !== 'greedy') expect(new Set(together.map((t) => t.join())).size, `${name}: the choices differ`).toBeGreaterThan(1)
      }
      await e.close()
    })
  }

  it('control: forks that sample their first token with another seed are not their requests run alone', async () => {
    const reseed = (plan: StepPlan): StepPlan => ({ ...plan, prefill: plan.prefill.map((p) => (p.forks ? { ...p, forks: p.forks.map((f) => ({ ...f, start: { ...f.start, sampling: { ...f.start.sampling, seed: f.start.sampling.seed! + 1000 } } })) } : p)) })
    const e = await engine(true, [], reseed)
    const base = { maxTokens: 24, sampling: { ...GREEDY, temperature: 1, seed: 70 }, ignoreEos: true }
    const alone: number[][] = []
    for (const [i, r] of choices('c-alone', base, 4).entries()) alone.push(await run(e, { ...r, after: undefined, cacheSalt: `c-${i}` }))
    const together = await Promise.all(choices('c', base, 4).map((r) => run(e, { ...r, cacheSalt: 'c' })))
    expect(together[0]).toEqual(alone[0])
    expect(together.slice(1)).not.toEqual(alone.slice(1))
    await e.close()
  })
})
