import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { API_SAMPLING_DEFAULTS, type TokenLogprob } from '../../../shared/src/generation.ts'
import { exactnessRequests, openEditedEngine, textsAlone, textsTogether, type EditedEngine, type EditedEngineOptions } from '../../test/support/edited-engine.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import type { Engine } from '../engine/engine.ts'
import type { SpeculationSettings } from '../engine/speculation.ts'
import type { EngineEvent, EngineRequest } from '../engine/types.ts'
import { DEFAULT_MODEL_DIR } from '../config.ts'
import { presentsOf } from './batch-kv-cache.ts'
import { readModelDir, type ModelDir } from './model-dir.ts'
import { kvBytesPerToken } from './runner.ts'
import type { SessionIo } from './session-io.ts'
import { SlotKvCache } from './slot-kv-cache.ts'
import { ModelTokenizer } from './tokenizer.ts'

/**
 * Speculative decoding must be exact: every draft token a row keeps is the token it samples at
 * that position, so greedy and seeded texts (penalties included) are the texts of plain decoding,
 * alone and batched, across preemption, prefix-cache hits, stream resume and grammar-constrained
 * rows, on a learned-position graph, a RoPE graph and the trained default model. `on` verifies
 * every draft prompt lookup finds, so the runs are full of verify steps; each case checks that
 * drafts were accepted, or it would prove nothing. The controls keep one token's KV too many
 * after a refusal, or feed the drafts one position late: both must change the texts.
 */

const ON: SpeculationSettings = { mode: 'on', maxDraft: 4 }
const OFF: SpeculationSettings = { mode: 'off', maxDraft: 4 }

const root = mkdtempSync(join(tmpdir(), 'zerolayer-spec-exact-'))
beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny'), seed: 42, kvCache: 'slots' })
  await generateModel({ preset: 'tiny-llama', outDir: join(root, 'tiny-llama'), seed: 42, kvCache: 'slots' })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** Greedy requests, a code-like one whose text repeats, and each again seeded (some with penalties). */
function requests(dir: ModelDir): EngineRequest[] {
  const tok = new ModelTokenizer(dir)
  const repeats: EngineRequest = { id: 'rep', promptTokens: tok.encodeText('for i in range(10):\n    x = x + 1\nfor i in range(10):\n    x = x + 1\nfor i in'), maxTokens: 30, stop: [], sampling: API_SAMPLING_DEFAULTS, priority: 0, ignoreEos: true }
  const greedy = [...exactnessRequests(dir), { ...repeats, sampling: { ...API_SAMPLING_DEFAULTS, temperature: 0 } }]
  const seeded = greedy.map((r, i) => ({
    ...r,
    id: `${r.id}-seeded`,
    sampling: { ...API_SAMPLING_DEFAULTS, temperature: 0.9, topP: 0.95, seed: 500 + i, ...(i % 3 === 1 ? { frequencyPenalty: 0.4, repetitionPenalty: 1.1 } : {}) },
  }))
  return [...greedy, ...seeded]
}

const accepted = (e: EditedEngine) => e.engine.stats().speculation?.acceptedTokens ?? 0

const cases: Array<[string, () => ModelDir]> = [
  ['a learned-position graph (tiny)', () => readModelDir(join(root, 'tiny'))],
  ['a RoPE graph (tiny-llama)', () => readModelDir(join(root, 'tiny-llama'))],
  ['the trained default model (zl-code)', () => readModelDir(DEFAULT_MODEL_DIR)],
]

for (const [name, dirOf] of cases) {
  describe(`speculative decoding on ${name}`, () => {
    it('gives greedy and seeded texts, alone and batched, exactly as plain decoding', async () => {
      const dir = dirOf()
      const reqs = requests(dir)
      const off = await openEditedEngine(dir, { limits: { speculation: OFF } })
      const on = await openEditedEngine(dir, { limits: { speculation: ON } })
      const reference = await textsAlone(off, reqs)
      expect(reference.every((t) => t.length > 0)).toBe(true)
      expect(await textsAlone(on, reqs)).toEqual(reference)
      const alone = accepted(on)
      expect(alone).toBeGreaterThan(0)
      expect(await textsTogether(on, reqs)).toEqual(reference)
      expect(accepted(on)).toBeGreaterThan(alone)
      await Promise.all([off.engine.close(), on.engine.close()])
    })
  })
}

/** A request's generated tokens and its text, with each token's log-probability entry when asked. */
interface Outcome {
  text: string
  tokens: number[]
  logprobs: TokenLogprob[]
}

function outcome(engine: Engine, req: EngineRequest): Promise<Outcome> {
  const out: Outcome = { text: '', tokens: [], logprobs: [] }
  return new Promise((resolve, reject) => {
    const r = engine.submit(req, (e: EngineEvent) => {
      if (e.type === 'text') {
        out.text += e.text
        out.tokens.push(...e.tokens)
        out.logprobs.push(...(e.logprobs ?? []))
      } else if (e.error) reject(new Error(`${req.id}: ${e.error.code}`))
      else resolve(out)
    })
    if (!r.ok) reject(new Error(r.code))
  })
}

/** A log-probability entry without its values: its token and its alternatives in order. */
const entryShape = (lp: TokenLogprob) => [lp.token, lp.top.map((t) => t.token)]

const together = (o: EditedEngine, reqs: EngineRequest[]) => Promise.all(reqs.map((r) => outcome(o.engine, r)))

describe('speculative decoding across the engine’s other paths (tiny-llama)', () => {
  const dir = () => readModelDir(join(root, 'tiny-llama'))

  it('is exact when rows are preempted and recomputed, and when prompts and answers come from the prefix cache', async () => {
    const reqs = requests(dir())
    const plain = await openEditedEngine(dir(), { limits: { speculation: OFF } })
    const reference = await textsAlone(plain, reqs)
    let preempted = 0
    // A budget of 80 tokens for 18 rows: rows are preempted and recomputed all along.
    const budgeted = await openEditedEngine(dir(), { limits: { speculation: ON, kvBudgetBytes: 80 * kvBytesPerToken(plain.io) }, observer: { onPreempted: () => preempted++ } })
    expect(await textsTogether(budgeted, reqs)).toEqual(reference)
    expect(preempted).toBeGreaterThan(0)
    expect(accepted(budgeted)).toBeGreaterThan(0)

    const cached = await openEditedEngine(dir(), { limits: { speculation: ON, prefixCacheBytes: 64 << 20, prefixBlockTokens: 8 } })
    expect(await textsTogether(cached, reqs)).toEqual(reference)
    // Again: prompts (and for the follow-ups, answers) now come from the cache.
    expect(await textsTogether(cached, reqs.map((r) => ({ ...r, id: `${r.id}-again` })))).toEqual(reference)
    expect(cached.engine.stats().prefixCache!.hits).toBeGreaterThan(0)
    const followUps = reqs.map((r, i) => ({ ...r, id: `${r.id}-turn2`, promptTokens: [...r.promptTokens, ...new ModelTokenizer(dir()).encodeText(reference[i]!)], maxTokens: 8 }))
    const plainFollowUps = await textsAlone(plain, followUps)
    expect(await textsTogether(cached, followUps)).toEqual(plainFollowUps)
    await Promise.all([plain.engine.close(), budgeted.engine.close(), cached.engine.close()])
  })

  it('is exact for a resumed stream: a continuation handed the first tokens ends as the undisturbed run', async () => {
    const reqs = requests(dir())
    const on = await openEditedEngine(dir(), { limits: { speculation: ON } })
    const whole = await together(on, reqs)
    const resumed = await together(
      on,
      reqs.map((r, i) => ({ ...r, id: `${r.id}-resumed`, resumeTokens: whole[i]!.tokens.slice(0, 3) })),
    )
    expect(resumed.map((o) => o.text)).toEqual(whole.map((o) => o.text))
    const off = await openEditedEngine(dir(), { limits: { speculation: OFF } })
    expect(whole.map((o) => o.text)).toEqual(await textsAlone(off, reqs))
    await Promise.all([on.engine.close(), off.engine.close()])
  })

  it('is exact for grammar-constrained rows and their log probabilities', async () => {
    const tok = new ModelTokenizer(dir())
    const prompts = ['{"a": 1, "b": 1, "a": 1, "b":', 'JSON please', '{"x": [1, 1, 1, 1, 1, 1', 'ok']
    const reqs = prompts.flatMap((p, i): EngineRequest[] => [
      { id: `json-${i}`, promptTokens: tok.encodeText(p), maxTokens: 40, stop: [], sampling: { ...API_SAMPLING_DEFAULTS, temperature: 0 }, priority: 0, constraint: { kind: 'json_object' }, logprobs: { top: 2 } },
      { id: `free-${i}`, promptTokens: tok.encodeText(p), maxTokens: 24, stop: [], sampling: { ...API_SAMPLING_DEFAULTS, temperature: 0.8, seed: 9 + i }, priority: 0, ignoreEos: true, logprobs: { top: 1 } },
    ])
    const off = await openEditedEngine(dir(), { limits: { speculation: OFF }, structured: true })
    const on = await openEditedEngine(dir(), { limits: { speculation: ON }, structured: true })
    const reference = await together(off, reqs)
    const speculated = await together(on, reqs)
    expect(speculated.map((o) => [o.text, o.tokens])).toEqual(reference.map((o) => [o.text, o.tokens]))
    // The same tokens and alternatives; their values to float rounding (a verify run's matrix
    // products have more rows than a decode step's, as a batch's have more than one request's).
    expect(speculated.map((o) => o.logprobs.map(entryShape))).toEqual(reference.map((o) => o.logprobs.map(entryShape)))
    speculated.forEach((o, i) => o.logprobs.forEach((lp, j) => expect(lp.logprob).toBeCloseTo(reference[i]!.logprobs[j]!.logprob, 4)))
    expect(accepted(on)).toBeGreaterThan(0)
    await Promise.all([off.engine.close(), on.engine.close()])
  })
})

/** Keeps one more token's K/V than the row accepted (unless it accepted all): the KV then holds a refused draft token. */
class KeepsOneMore extends SlotKvCache {
  constructor(private readonly sessionIo: SessionIo) {
    super(sessionIo)
  }

  override acceptRagged(outputs: ort.InferenceSession.ReturnType, counts: readonly number[]): void {
    const width = presentsOf(this.sessionIo, outputs)[0]!.key.dims[2]!
    super.acceptRagged(outputs, counts.map((c) => Math.min(c + 1, width)))
  }
}

/** Feeds ragged rows (drafts) one position late. */
class OnePositionLate extends SlotKvCache {
  override feeds(ids: BigInt64Array, s: number, counts?: readonly number[]): Record<string, ort.Tensor> {
    const feeds = super.feeds(ids, s, counts)
    if (counts) {
      const positions = feeds.position_ids!.data as BigInt64Array
      for (let i = 0; i < positions.length; i++) positions[i]! += 1n
    }
    return feeds
  }
}

describe('the controls', () => {
  const controls: Array<[string, EditedEngineOptions['cache']]> = [
    ['an acceptance that keeps one token too many', (io) => new KeepsOneMore(io)],
    ['drafts fed one position late', (io) => new OnePositionLate(io)],
  ]
  for (const [what, cache] of controls) {
    it(`would catch ${what}`, async () => {
      const dir = readModelDir(join(root, 'tiny-llama'))
      const reqs = requests(dir)
      const reference = await textsAlone(await openEditedEngine(dir, { limits: { speculation: OFF } }), reqs)
      const wrong = await openEditedEngine(dir, { limits: { speculation: ON }, cache })
      expect(await textsAlone(wrong, reqs)).not.toEqual(reference)
    })
  }
})
