import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../engine/engine.ts'
import { GREEDY, type EngineObserver, type EngineRequest } from '../engine/types.ts'
import { generateText } from '../../test/support/generate-text.ts'
import { BatchKvCache, type BatchCache } from './batch-kv-cache.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import { readModelDir, type ModelDir } from './model-dir.ts'
import { ModelStep } from './model-step.ts'
import { kvBytesPerToken, toModelInfo, type Batching, type ModelInfo, type ModelRunner, type StepPlan } from './runner.ts'
import { batchCouplingOps } from './graph-ops.ts'
import { openModelSession } from './open-session.ts'
import { readSessionIo } from './session-io.ts'
import { SLOT_STEP, SlotKvCache } from './slot-kv-cache.ts'
import { ModelTokenizer } from './tokenizer.ts'
import { composeEngine } from '../compose-engine.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { InProcessRunner } from '../../test/support/in-process-runner.ts'

/**
 * Continuous batching must be exact: a greedy request returns the same text whether it ran
 * alone or joined/left a batch with others of different lengths — for both KV interfaces: the
 * presets' slot cache (models/<preset>) and Optimum's concat interface with its left-padded cache
 * (the same preset generated with kvCache 'concat'), and for the Qwen2 shape (tiny-qwen2, slot
 * KV, generated here). The control runs feed wrong positions (the classic bugs of each layout)
 * and must differ, proving the test can fail.
 */

/** The bug the control simulates: positions = buffer column, counting pads. */
class BufferIndexPositions extends BatchKvCache {
  override decodeFeeds() {
    const feeds = super.decodeFeeds()
    feeds.position_ids = new ort.Tensor('int64', new BigInt64Array(this.rows).fill(BigInt(this.width)), [this.rows, 1])
    return feeds
  }
}

/** The slot layout's version of the bug: every row at the longest row's position. */
class SharedPositions extends SlotKvCache {
  override decodeFeeds() {
    const feeds = super.decodeFeeds()
    feeds.position_ids = new ort.Tensor('int64', new BigInt64Array(this.rows).fill(BigInt(Math.max(...this.lens))), [this.rows, 1])
    return feeds
  }
}

async function inProcessEngine(dir: ModelDir, cache?: (io: ReturnType<typeof readSessionIo>) => BatchCache, budget?: { tokens: number; observer: EngineObserver }, batching?: Batching) {
  // As a node opens it: an Optimum graph (zl-code) gets the slot KV edit; the copies generated on
  // the concat path here stay on it.
  const { session } = await openModelSession(dir.onnxPath, ONE_THREAD, { config: dir.config, slotKvEdit: !dir.onnxPath.startsWith(concatRoot) })
  const io = readSessionIo(session, dir.config)
  const info = { ...toModelInfo(dir, { ...io, couplingOps: batchCouplingOps(dir.onnxPath) }), ...(batching ? { batching } : {}) }
  const kvBudgetBytes = budget ? budget.tokens * info.kvBytesPerToken : 1 << 30
  const runner = new InProcessRunner(info, new ModelStep(session, io, info.eosTokenIds, { batch: cache?.(io), kvBudgetBytes }))
  return new Engine({ runner, decoder: new ModelTokenizer(dir), limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes, prefillChunkTokens: 16 }, ...(budget ? { observer: budget.observer } : {}) })
}

function requests(dir: ModelDir): EngineRequest[] {
  const tok = new ModelTokenizer(dir)
  const prompts = ['Hi', 'The quick brown fox jumps', 'Once upon a time, in a land far away, there lived', 'a', 'Streaming tokens from', 'zerolayer is a global LLM API that routes to the nearest node', '1 2 3 4', 'Hello, world! How are you doing today, my friend?', 'ok']
  return prompts.map((p, i) => ({ id: `r${i}`, promptTokens: tok.encodeText(p), maxTokens: 6 + ((i * 7) % 23), stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }))
}

const concatRoot = mkdtempSync(join(tmpdir(), 'zerolayer-batching-concat-'))
beforeAll(async () => {
  for (const preset of ['tiny', 'tiny-llama'] as const) await generateModel({ preset, outDir: join(concatRoot, preset), seed: 42, kvCache: 'concat' })
  for (const preset of ['tiny-derived-positions', 'tiny-qwen2'] as const) await generateModel({ preset, outDir: join(concatRoot, preset), seed: 42 })
}, 30_000)
afterAll(() => rmSync(concatRoot, { recursive: true, force: true }))

const MODELS = [
  ['tiny', 'slots', 'models/tiny'],
  ['tiny-llama', 'slots', 'models/tiny-llama'],
  // The trained default model: 4-bit MatMulNBits, its slot-KV edit made at load.
  ['zl-code', 'slots', 'trained/zl-code'],
  ['tiny', 'concat', join(concatRoot, 'tiny')],
  ['tiny-llama', 'concat', join(concatRoot, 'tiny-llama')],
  ['tiny-qwen2', 'slots', join(concatRoot, 'tiny-qwen2')],
] as const

for (const [preset, kv, path] of MODELS) {
  describe(`continuous batching on the ${preset} model (${kv} KV)`, () => {
    let dir: ModelDir
    beforeAll(() => {
      dir = readModelDir(path)
    })

    it('returns, for 9 concurrent greedy requests, exactly the text each gets alone', async () => {
      const reqs = requests(dir)
      const single = await inProcessEngine(dir)
      const alone: string[] = []
      for (const r of reqs) alone.push(await generateText(single, { ...r, id: `alone-${r.id}` }))
      const batched = await inProcessEngine(dir)
      const together = await Promise.all(reqs.map((r) => generateText(batched, r)))
      expect(together).toEqual(alone)
      expect(alone.every((t) => t.length > 0)).toBe(true)
    })

    it('gives the same texts under a KV budget that preempts (recompute) and bounds the caches', async () => {
      const reqs = requests(dir)
      const single = await inProcessEngine(dir)
      const alone: string[] = []
      for (const r of reqs) alone.push(await generateText(single, { ...r, id: `alone-${r.id}` }))
      const preempted: string[] = []
      const tokens = 96 // about two of these sequences' worth: the batch fills it, growth preempts
      let over = 0
      let decodes = 0
      const watched = (io: ReturnType<typeof readSessionIo>): BatchCache => {
        if (kv === 'concat') return new BatchKvCache(io)
        const perToken = kvBytesPerToken(io)
        // The bound: the budget, or the live rows' need rounded to the slot step when that alone is more.
        return new (class extends SlotKvCache {
          override acceptDecode(outputs: ort.InferenceSession.ReturnType): void {
            super.acceptDecode(outputs)
            decodes++
            const live = this.rows * Math.ceil((Math.max(...this.lens) + 1) / SLOT_STEP) * SLOT_STEP * perToken
            if (this.heldBytes > Math.max(tokens * perToken, live)) over++
          }
        })(io)
      }
      const tight = await inProcessEngine(dir, watched, { tokens, observer: { onPreempted: (id) => preempted.push(id) } })
      const together = await Promise.all(reqs.map((r) => generateText(tight, r)))
      expect(together).toEqual(alone)
      expect(preempted.length).toBeGreaterThan(0)
      if (kv === 'slots') expect({ decodes: decodes > 0, over }).toEqual({ decodes: true, over: 0 })
    })

    it('would catch buffer-index position ids (control)', async () => {
      const reqs = requests(dir)
      const single = await inProcessEngine(dir)
      const alone: string[] = []
      for (const r of reqs) alone.push(await generateText(single, { ...r, id: `alone-${r.id}` }))
      const wrong = await inProcessEngine(dir, (io) => {
        expect(io.kvCache).toBe(kv)
        return kv === 'slots' ? new SharedPositions(io) : new BufferIndexPositions(io)
      })
      const together = await Promise.all(reqs.map((r) => generateText(wrong, r)))
      expect(together).not.toEqual(alone)
    })

    it('runs the same way through the worker-thread runner', async () => {
      const loaded = await composeEngine({ intraOpThreads: 1, modelDir: path, executionProvider: 'cpu', limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes: 1024 * 1024 * 1024, prefillChunkTokens: 16 } })
      const reqs = requests(dir)
      const single = await inProcessEngine(dir)
      const alone: string[] = []
      for (const r of reqs.slice(0, 4)) alone.push(await generateText(single, { ...r, id: `alone-${r.id}` }))
      const together = await Promise.all(reqs.slice(0, 4).map((r) => generateText(loaded.engine, r)))
      expect(together).toEqual(alone)
      await loaded.engine.close()
    })
  })
}

/**
 * A graph without position_ids (older Optimum GPT-2 exports) derives positions from the past
 * length, the same for every row: in a left-padded batch a shorter row's positions are shifted.
 * The node must detect it and batch only rows of equal length; the reference is `tiny` with
 * explicit positions (same seed, same weights, same concat graph but for the position input).
 */
describe('a graph without position_ids (positions from the past length)', () => {
  let derived: ModelDir
  let explicit: ModelDir
  beforeAll(() => {
    derived = readModelDir(join(concatRoot, 'tiny-derived-positions'))
    explicit = readModelDir(join(concatRoot, 'tiny'))
  })

  async function aloneOn(dir: ModelDir, reqs: EngineRequest[]): Promise<string[]> {
    const single = await inProcessEngine(dir)
    const out: string[] = []
    for (const r of reqs) out.push(await generateText(single, { ...r, id: `alone-${r.id}` }))
    return out
  }

  it('is detected at load: equal-length batching', async () => {
    const session = await ort.InferenceSession.create(derived.onnxPath, ONE_THREAD)
    const io = readSessionIo(session, derived.config)
    expect({ hasPositionIds: io.hasPositionIds, kvCache: io.kvCache, batching: toModelInfo(derived, { ...io, couplingOps: batchCouplingOps(derived.onnxPath) }).batching }).toEqual({ hasPositionIds: false, kvCache: 'concat', batching: 'equal-lengths' })
  })

  it('returns, for 9 concurrent greedy requests, the texts of the explicit-position model run alone', async () => {
    const reqs = requests(derived)
    const reference = await aloneOn(explicit, reqs)
    expect(await aloneOn(derived, reqs)).toEqual(reference)
    const batched = await inProcessEngine(derived)
    expect(await Promise.all(reqs.map((r) => generateText(batched, r)))).toEqual(reference)
  })

  it('still shares steps between requests of equal length', async () => {
    const tok = new ModelTokenizer(derived)
    const prompts = ['one two three four', 'six seven eight nine', 'red green blue white', 'up down left right'].map((p) => tok.encodeText(p))
    // Four 3-token prompts fit one 16-token prefill chunk, so they start (and stay) equal.
    const len = 3
    expect(Math.min(...prompts.map((t) => t.length))).toBeGreaterThanOrEqual(len)
    const reqs: EngineRequest[] = prompts.map((t) => t.slice(0, len)).map((promptTokens, i) => ({ id: `eq${i}`, promptTokens, maxTokens: 12, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }))
    const reference = await aloneOn(explicit, reqs)
    let widest = 0
    const engine = await inProcessEngine(derived, undefined, { tokens: 1 << 20, observer: { onStep: (s) => void (widest = Math.max(widest, s.decodeRows)) } })
    expect(await Promise.all(reqs.map((r) => generateText(engine, r)))).toEqual(reference)
    expect(widest).toBe(4)
  })

  it('would serve wrong text if batched continuously (control: the bug this mode prevents)', async () => {
    const reqs = requests(derived)
    const reference = await aloneOn(explicit, reqs)
    const continuous = await inProcessEngine(derived, undefined, undefined, 'continuous')
    expect(await Promise.all(reqs.map((r) => generateText(continuous, r)))).not.toEqual(reference)
  })

  it('runs the same way through the worker-thread runner', async () => {
    const loaded = await composeEngine({ intraOpThreads: 1, modelDir: join(concatRoot, 'tiny-derived-positions'), executionProvider: 'cpu', limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes: 1024 * 1024 * 1024, prefillChunkTokens: 16 } })
    expect(loaded.info.batching).toBe('equal-lengths')
    const reqs = requests(derived).slice(0, 4)
    const reference = await aloneOn(explicit, reqs)
    expect(await Promise.all(reqs.map((r) => generateText(loaded.engine, r)))).toEqual(reference)
    await loaded.engine.close()
  })
})

/**
 * Many exports pad the vocabulary: logits are wider than config.json's vocab_size. Rows must be
 * read by the logits tensor's own shape, or every batch row after the first reads another row's
 * numbers. `tiny` (512 logits) with config.json saying 500: batched texts equal those alone.
 */
describe('logits wider than config vocab_size (a padded vocabulary)', () => {
  it('returns, for 9 concurrent greedy requests, exactly the text each gets alone', async () => {
    const path = join(concatRoot, 'tiny-padded-vocab')
    cpSync('models/tiny', path, { recursive: true })
    const configPath = join(path, 'config.json')
    writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), vocab_size: 500 }))
    const dir = readModelDir(path)
    expect(dir.config.vocabSize).toBe(500)
    const reqs = requests(dir)
    const single = await inProcessEngine(dir)
    const alone: string[] = []
    for (const r of reqs) alone.push(await generateText(single, { ...r, id: `alone-${r.id}` }))
    const batched = await inProcessEngine(dir)
    expect(await Promise.all(reqs.map((r) => generateText(batched, r)))).toEqual(alone)
  })
})
