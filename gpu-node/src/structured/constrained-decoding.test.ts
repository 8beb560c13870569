/**
 * Structured output through the engine on a real (generated, untrained) model: every constrained
 * request ends in a document its schema accepts, whatever the model prefers; a constrained row
 * gets the same tokens alone, batched with others and under a KV budget that preempts it
 * (recompute replays its tokens into a fresh grammar state); a continuation handed the first
 * tokens ends as the undisturbed run did. The control: the same requests unconstrained are not
 * JSON, so the checks can fail.
 */
import * as ort from 'onnxruntime-node'
import { beforeAll, describe, expect, it } from 'vitest'
import { GREEDY, type OutputConstraint } from '../../../shared/src/generation.ts'
import { Engine } from '../engine/engine.ts'
import type { EngineEvent, EngineRequest } from '../engine/types.ts'
import { readModelDir, type ModelDir } from '../model/model-dir.ts'
import { ModelStep } from '../model/model-step.ts'
import { toModelInfo } from '../model/runner.ts'
import { batchCouplingOps } from '../model/graph-ops.ts'
import { readSessionIo } from '../model/session-io.ts'
import { ModelTokenizer } from '../model/tokenizer.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { InProcessRunner } from '../../test/support/in-process-runner.ts'
import { codePoints, parsedObject } from '../../test/support/parsed-object.ts'
import { Grammars } from './grammars.ts'
import { encodedVocab, tokenPieces } from './tokenizer-info.ts'

const ORDER = {
  type: 'object',
  properties: {
    item: { type: 'string', minLength: 1, maxLength: 10 },
    size: { enum: ['small', 'large'] },
    qty: { type: 'integer', minimum: 1, maximum: 99 },
    gift: { type: 'boolean' },
  },
  required: ['item', 'size', 'qty', 'gift'],
  additionalProperties: false,
}
const SCHEMA: OutputConstraint = { kind: 'json_schema', schema: JSON.stringify(ORDER) }

function isOrder(text: string): boolean {
  const o = parsedObject(text)
  if (!o) return false
  const qty = o.qty as number
  return Object.keys(o).sort().join() === 'gift,item,qty,size' && codePoints(o.item) >= 1 && codePoints(o.item) <= 10 && (o.size === 'small' || o.size === 'large') && Number.isInteger(qty) && qty >= 1 && qty <= 99 && typeof o.gift === 'boolean'
}

interface Run {
  text: string
  tokens: number[]
  reason: string
}

function run(engine: Engine, req: EngineRequest): Promise<Run> {
  let text = ''
  const tokens: number[] = []
  return new Promise((resolve, reject) => {
    const r = engine.submit(req, (e: EngineEvent) => {
      if (e.type === 'text') {
        text += e.text
        tokens.push(...e.tokens)
      } else if (e.error) reject(new Error(`${req.id}: ${e.error.code}`))
      else resolve({ text, tokens, reason: e.reason })
    })
    if (!r.ok) reject(new Error(r.code))
  })
}

describe('structured output through the engine (tiny model)', () => {
  let dir: ModelDir
  let tok: ModelTokenizer
  let grammars: Grammars
  beforeAll(() => {
    dir = readModelDir('models/tiny')
    tok = new ModelTokenizer(dir)
    grammars = new Grammars(encodedVocab(dir.tokenizerJson, dir.config.vocabSize), dir.eosTokenIds)
  })

  async function engine(kvBudgetTokens?: number, onPreempted?: () => void): Promise<Engine> {
    const session = await ort.InferenceSession.create(dir.onnxPath, ONE_THREAD)
    const io = readSessionIo(session, dir.config)
    const info = toModelInfo(dir, { ...io, couplingOps: batchCouplingOps(dir.onnxPath) })
    const kvBudgetBytes = kvBudgetTokens ? kvBudgetTokens * info.kvBytesPerToken : 1 << 30
    const vocab = encodedVocab(dir.tokenizerJson, dir.config.vocabSize)
    const runner = new InProcessRunner(info, new ModelStep(session, io, info.eosTokenIds, { kvBudgetBytes, grammars, tokenPiece: tokenPieces(vocab), vocabSize: vocab.tokens.length }))
    return new Engine({ runner, decoder: tok, limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes, prefillChunkTokens: 16 }, ...(onPreempted ? { observer: { onPreempted } } : {}) })
  }

  const PROMPTS = ['Order:', 'The customer wants', 'JSON please', 'a', 'Once upon a time, in a land far away', '{"item":']
  const requests = (constraint?: OutputConstraint): EngineRequest[] =>
    PROMPTS.map((p, i) => ({
      id: `r${i}`,
      promptTokens: tok.encodeText(p),
      maxTokens: 120,
      stop: [],
      // Greedy and seeded sampling both: the grammar must not make either depend on the batch.
      sampling: i % 2 === 0 ? GREEDY : { ...GREEDY, temperature: 1, seed: 1000 + i },
      priority: 0,
      ...(constraint ? { constraint } : {}),
    }))

  it('every constrained answer is a document its schema accepts, ended by the model (stop), alone = batched', async () => {
    const single = await engine()
    const alone: Run[] = []
    for (const r of requests(SCHEMA)) alone.push(await run(single, { ...r, id: `alone-${r.id}` }))
    for (const a of alone) {
      expect(isOrder(a.text), a.text).toBe(true)
      expect(a.reason).toBe('stop')
    }
    const together = await Promise.all(requests(SCHEMA).map((r) => run(single, r)))
    expect(together.map((t) => t.tokens)).toEqual(alone.map((a) => a.tokens))
    await single.close()
  })

  it('tool calls (required, one call): alone = batched, every answer one call its schema accepts; log probabilities change no token', async () => {
    const calls: OutputConstraint = { kind: 'tool_calls', format: 'hermes', tools: [{ name: 'order', schema: JSON.stringify(ORDER), strict: true }], mode: 'required', parallel: false }
    const e = await engine()
    const asked = requests(calls).map((r) => ({ ...r, maxTokens: 240 }))
    const alone: Run[] = []
    for (const r of asked) alone.push(await run(e, { ...r, id: `alone-${r.id}` }))
    for (const a of alone) {
      const m = /^<tool_call>\n\{"name": "order", "arguments": (.*)\}\n<\/tool_call>$/s.exec(a.text)
      expect(m, a.text).not.toBeNull()
      expect(isOrder(m![1]!), a.text).toBe(true)
      expect(a.reason).toBe('stop')
    }
    const together = await Promise.all(asked.map((r) => run(e, r)))
    expect(together.map((t) => t.tokens)).toEqual(alone.map((a) => a.tokens))
    const withLogprobs = await Promise.all(asked.map((r) => run(e, { ...r, id: `lp-${r.id}`, logprobs: { top: 3 } })))
    expect(withLogprobs.map((t) => t.tokens)).toEqual(alone.map((a) => a.tokens))
    await e.close()
  })

  it('control: unconstrained, the same requests are not such documents', async () => {
    const e = await engine()
    const free = await Promise.all(requests().map((r) => run(e, { ...r, maxTokens: 40 })))
    expect(free.filter((f) => isOrder(f.text))).toEqual([])
    await e.close()
  })

  it('preempted and recomputed under a tight KV budget, a constrained row gets the same tokens', async () => {
    const roomy = await engine()
    const alone = await Promise.all(requests(SCHEMA).map((r) => run(roomy, r)))
    await roomy.close()
    let preempted = 0
    const tight = await engine(96, () => preempted++)
    const squeezed = await Promise.all(requests(SCHEMA).map((r) => run(tight, r)))
    expect(preempted).toBeGreaterThan(0)
    expect(squeezed.map((s) => s.tokens)).toEqual(alone.map((a) => a.tokens))
    await tight.close()
  })

  it('a continuation handed the first tokens (resume) ends as the undisturbed run did', async () => {
    const e = await engine()
    const [whole] = await Promise.all([run(e, requests(SCHEMA)[1]!)])
    const cut = Math.floor(whole!.tokens.length / 2)
    const rest = await run(e, { ...requests(SCHEMA)[1]!, id: 'resumed', resumeTokens: whole!.tokens.slice(0, cut) })
    expect([...whole!.tokens.slice(0, cut), ...rest.tokens]).toEqual(whole!.tokens)
    await e.close()
  })
})
