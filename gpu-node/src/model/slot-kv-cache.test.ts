import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { GREEDY } from '../engine/types.ts'
import { BatchKvCache } from './batch-kv-cache.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import { readModelDir } from './model-dir.ts'
import { ModelStep } from './model-step.ts'
import { kvBytesPerToken, type PrefillPart, type StepPlan, type StepResult } from './runner.ts'
import { readSessionIo, type SessionIo } from './session-io.ts'
import { openModelSession } from './open-session.ts'
import { KvBufferSet } from './kv-buffer-set.ts'
import { SlotKvCache } from './slot-kv-cache.ts'
import { ONE_THREAD } from '../../test/support/one-thread.ts'

/**
 * The slot KV interface (the presets' graphs) against Optimum's concat interface (the same preset
 * and seed generated with kvCache 'concat'): one scripted run of StepPlans — a padded
 * multi-prompt prefill, chunked prefill during decoding, rows leaving (in-place compaction),
 * rows joining after that, capacity growth and shrinking — must give every session.run's logits
 * within 1e-4 and identical greedy tokens. A small slot step makes the capacity move often.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-slot-kv-'))
beforeAll(async () => {
  for (const preset of ['tiny', 'tiny-llama'] as const) {
    for (const kvCache of ['slots', 'concat'] as const) await generateModel({ preset, outDir: join(root, `${preset}-${kvCache}`), seed: 42, kvCache })
  }
}, 30_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** A deterministic prompt of `n` tokens for sequence `id`. */
const prompt = (id: number, n: number): number[] => Array.from({ length: n }, (_, i) => 3 + ((id * 37 + i * 11) % 500))

function start(id: number, n: number): PrefillPart['start'] {
  return { sampling: GREEDY, promptLen: n, banEos: true, tokens: prompt(id, n) }
}
const whole = (id: number, n: number): PrefillPart => ({ seqId: id, tokens: prompt(id, n), last: true, start: start(id, n) })

/** The scripted run: sequence ids 1..8 with prompts of various lengths. */
function plans(): StepPlan[] {
  const decode = (release: number[] = [], prefill: PrefillPart[] = []): StepPlan => ({ release, decode: true, prefill })
  const long = prompt(4, 13)
  const steps: StepPlan[] = [{ release: [], decode: false, prefill: [whole(1, 3), whole(2, 7), whole(3, 5)] }]
  steps.push(decode(), decode(), decode())
  // Sequence 4 is prefilled in three chunks while the batch decodes, then joins.
  steps.push(decode([], [{ seqId: 4, tokens: long.slice(0, 5), last: false, start: start(4, 13) }]))
  steps.push(decode([], [{ seqId: 4, tokens: long.slice(5, 10), last: false }]))
  steps.push(decode([], [{ seqId: 4, tokens: long.slice(10), last: true }]))
  for (let i = 0; i < 4; i++) steps.push(decode())
  steps.push(decode([2])) // a middle row leaves: compaction in place
  steps.push(decode([1], [whole(5, 4)])) // the first row leaves, another joins
  for (let i = 0; i < 20; i++) steps.push(decode()) // growth past several slot steps
  steps.push(decode([], [whole(6, 2)]))
  for (let i = 0; i < 4; i++) steps.push(decode())
  steps.push(decode([3, 4, 5], [whole(7, 3)])) // the long rows leave as a short one joins: shrink
  for (let i = 0; i < 3; i++) steps.push(decode())
  steps.push(decode([6, 7])) // the batch empties
  steps.push({ release: [], decode: true, prefill: [whole(8, 6)] })
  for (let i = 0; i < 3; i++) steps.push(decode())
  return steps
}

/** Runs the plans, recording every session.run's logits and every step's result. */
async function run(dir: string, slotStep?: number, kvBudgetBytes?: number): Promise<{ logits: Float32Array[]; results: StepResult[]; capacities: number[]; held: number[]; bytesPerSlot: number }> {
  const model = readModelDir(dir)
  const session = await ort.InferenceSession.create(model.onnxPath, ONE_THREAD)
  const io = readSessionIo(session, model.config)
  const logits: Float32Array[] = []
  const recording = {
    run: async (feeds: Record<string, ort.Tensor>) => {
      const out = await session.run(feeds)
      logits.push((out.logits as ort.Tensor).data as Float32Array)
      return out
    },
  } as unknown as ort.InferenceSession
  const batch = io.kvCache === 'slots' ? new SlotKvCache(io, slotStep) : new BatchKvCache(io)
  const step = new ModelStep(recording, io, model.eosTokenIds, { batch, ...(kvBudgetBytes ? { kvBudgetBytes } : {}) })
  const results: StepResult[] = []
  const capacities: number[] = []
  const held: number[] = []
  try {
    for (const plan of plans()) {
      results.push(await step.run(plan))
      if (batch instanceof SlotKvCache) {
        capacities.push(batch.capacity)
        held.push(batch.heldBytes)
      }
    }
  } finally {
    await session.release()
  }
  return { logits, results, capacities, held, bytesPerSlot: kvBytesPerToken(io) }
}

/** `fn` with a session on `preset`'s slot-layout graph and what it declares, released after. */
async function onSlotsSession(preset: string, fn: (session: ort.InferenceSession, io: SessionIo) => Promise<void>, lastLogits = false): Promise<void> {
  const model = readModelDir(join(root, `${preset}-slots`))
  // With `lastLogits`, as served: the load-time edit that gives the graph num_logits_to_keep.
  const session = lastLogits ? (await openModelSession(model.onnxPath, ONE_THREAD, { config: model.config, lastLogitsEdit: true })).session : await ort.InferenceSession.create(model.onnxPath, ONE_THREAD)
  try {
    await fn(session, readSessionIo(session, model.config))
  } finally {
    await session.release()
  }
}

for (const preset of ['tiny', 'tiny-llama'] as const) {
  describe(`slot KV cache on ${preset}`, () => {
    it('matches the concat interface: logits within 1e-4, identical greedy tokens, through growth, leaving, joining and shrinking', async () => {
      const concat = await run(join(root, `${preset}-concat`))
      const slots = await run(join(root, `${preset}-slots`), 4)
      expect(slots.logits.length).toBe(concat.logits.length)
      let maxDiff = 0
      slots.logits.forEach((l, i) => {
        expect(l.length, `run ${i}`).toBe(concat.logits[i].length)
        // Equal first: banned tokens' logits are -Infinity in both (lm-head-bias.ts), and -∞ − -∞ is NaN.
        for (let j = 0; j < l.length; j++) if (l[j] !== concat.logits[i][j]) maxDiff = Math.max(maxDiff, Math.abs(l[j] - concat.logits[i][j]))
      })
      expect(maxDiff).toBeLessThan(1e-4)
      const tokens = (r: StepResult[]) => r.map((x) => ({ decoded: x.decoded, joined: x.joined, rows: x.kvRows }))
      expect(tokens(slots.results)).toEqual(tokens(concat.results))
      // kvTokens is the longest row; the capacity grew in steps of 4, shrank when the long rows
      // left, and was freed when the batch emptied.
      slots.results.forEach((r, i) => expect(r.kvTokens).toBeLessThanOrEqual(slots.capacities[i]))
      const widths = slots.capacities
      expect(widths.every((w) => w % 4 === 0)).toBe(true)
      expect(new Set(widths).size).toBeGreaterThan(5)
      expect(widths.some((w, i) => i > 0 && slots.results[i].kvRows > 0 && slots.results[i - 1].kvRows > 0 && w < widths[i - 1])).toBe(true)
      expect(widths[widths.length - 5]).toBe(0)
    })

    it("gives a sequence's prefill cache one row, with room for its whole prompt before the first chunk", async () => {
      await onSlotsSession(preset, async (session, io) => {
        const cache = SlotKvCache.forSequence(io, 1)
        cache.expect(101)
        const capacity = cache.capacity
        expect(capacity).toBeGreaterThanOrEqual(101)
        // One row: not the batch's step of eight.
        expect(cache.heldBytes).toBe(capacity * kvBytesPerToken(io))
        const tokens = prompt(1, 100)
        for (let at = 0; at < 100; at += 25) {
          cache.accept(await session.run(cache.feeds(BigInt64Array.from(tokens.slice(at, at + 25), (t) => BigInt(t)), 25)), 25)
          expect(cache.capacity, `after ${at + 25} tokens`).toBe(capacity)
        }
      })
    })

    it("feeds a prompt's first chunk no past, and an empty batch takes a lone sequence's buffers without copying them", async () => {
      await onSlotsSession(preset, async (session, io) => {
        const prefilled = async () => {
          const cache = SlotKvCache.forSequence(io, 1)
          cache.expect(41)
          const tokens = prompt(1, 40)
          const widths: number[] = []
          for (const at of [0, 20]) {
            const feeds = cache.feeds(BigInt64Array.from(tokens.slice(at, at + 20), (t) => BigInt(t)), 20)
            widths.push(feeds['past_key_values.0.key']!.dims[2]!, feeds.attention_mask!.dims[1]!)
            cache.accept(await session.run(feeds), 20)
          }
          return { cache, widths, join: cache.join(1, 7) }
        }
        const { cache, widths, join: joining } = await prefilled()
        expect(widths).toEqual([0, 20, cache.capacity, cache.capacity + 20])
        const batch = new SlotKvCache(io)
        batch.relayout(new Set(), [joining])
        const past = () => batch.decodeFeeds()['past_key_values.0.key']!.data as Float32Array
        expect({ rows: batch.rows, capacity: batch.capacity, held: batch.heldBytes }).toEqual({ rows: 1, capacity: cache.capacity, held: cache.heldBytes })
        expect(past().buffer).toBe((joining.layers[0]!.key.data as Float32Array).buffer)
        // A second sequence joining grows the rows, the first one's tokens copied over.
        const second = await prefilled()
        batch.relayout(new Set(), [{ ...second.join, seqId: 2 }])
        expect(batch.rows).toBe(2)
        expect(past().buffer).not.toBe((joining.layers[0]!.key.data as Float32Array).buffer)
        // No room for the sequence's buffers: the batch sizes its own.
        const tight = new SlotKvCache(io)
        tight.room = () => 0
        tight.relayout(new Set(), [(await prefilled()).join])
        expect(tight.rows).toBe(1)
        expect((tight.decodeFeeds()['past_key_values.0.key']!.data as Float32Array).buffer).not.toBe((joining.layers[0]!.key.data as Float32Array).buffer)
      })
    })

    it("gives the next sequence an emptied batch's buffers when they hold its prompt", async () => {
      await onSlotsSession(preset, async (session, io) => {
        const buffers = new KvBufferSet(io.kvType)
        const prefilled = async (id: number, n: number) => {
          const cache = SlotKvCache.forSequence(io, id)
          cache.buffers = buffers
          cache.expect(n + 1)
          cache.accept(await session.run(cache.feeds(BigInt64Array.from(prompt(id, n), (t) => BigInt(t)), n)), n)
          return cache
        }
        const batch = new SlotKvCache(io)
        batch.buffers = buffers
        const first = await prefilled(1, 40)
        batch.relayout(new Set(), [first.join(1, 7)])
        const held = batch.decodeFeeds()['past_key_values.0.key']!.data as Float32Array
        batch.relayout(new Set([1]))
        expect(batch.rows).toBe(0)
        // A little longer than the first: it fits the buffers the batch let go, at their capacity.
        const second = await prefilled(2, 44)
        expect(second.capacity).toBe(first.capacity)
        expect((second.join(2, 7).layers[0]!.key.data as Float32Array).buffer).toBe(held.buffer)
      })
    })

    it('prefills rows that continue different cached blocks together, ragged, as each would alone', async () => {
      await onSlotsSession(preset, async (session, io) => {
        const B = 4
        // Blocks of 4 tokens read off a first run of each prefix.
        const prefixes = [8, 4, 12].map((n, i) => prompt(10 + i, n))
        const blocksOf = async (tokens: number[]) => {
          const c = SlotKvCache.forSequence(io, 99)
          c.expect(tokens.length + 1)
          c.accept(await session.run(c.feeds(BigInt64Array.from(tokens, BigInt), tokens.length)), tokens.length)
          return Array.from({ length: tokens.length / B }, (_, b) => c.readBlock(99, b * B, B))
        }
        const blocks = await Promise.all(prefixes.map(blocksOf))
        const rest = [prompt(20, 5), prompt(21, 1), prompt(22, 3)]
        const alone = async (r: number) => {
          const c = SlotKvCache.forSequence(io, r)
          c.expect(prefixes[r]!.length + rest[r]!.length + 1)
          c.startFrom(blocks[r]!)
          const out = await session.run(c.feeds(BigInt64Array.from(rest[r]!, BigInt), rest[r]!.length))
          const l = out.logits as ort.Tensor
          const v = l.dims[2]!
          return Array.from((l.data as Float32Array).subarray((l.dims[1]! - 1) * v, l.dims[1]! * v))
        }
        const ragged = new SlotKvCache(io, 4, 1)
        ragged.startRows([0, 1, 2], blocks, 30)
        // Each row reads its last token's logits: those from the earliest such position are kept.
        const out = await session.run(ragged.feedsRagged(rest, rest.map((t) => t.length - 1)))
        ragged.acceptRagged(out, rest.map((t) => t.length))
        const l = out.logits as ort.Tensor
        const [, positions, v] = l.dims as [number, number, number]
        const skipped = 5 - positions
        for (let r = 0; r < 3; r++) {
          const at = r * positions + rest[r]!.length - 1 - skipped
          const row = Array.from((l.data as Float32Array).subarray(at * v, (at + 1) * v))
          const ref = await alone(r)
          expect(Math.max(...row.map((x, i) => Math.abs(x - ref[i]!)))).toBeLessThan(1e-4)
          expect(row.indexOf(Math.max(...row))).toBe(ref.indexOf(Math.max(...ref)))
          expect(ragged.joinRow(r, 1)).toMatchObject({ seqId: r, len: prefixes[r]!.length + rest[r]!.length, row: r, start: 0 })
        }
        // Control: the padding's K/V kept as if real would make the shorter rows longer.
        expect(ragged.lens).toEqual([13, 5, 15])
        // Without the one-token row, fewer positions are kept (from the 3-token row's last) and read the same.
        const two = new SlotKvCache(io, 4, 1)
        two.startRows([0, 2], [blocks[0]!, blocks[2]!], 30)
        const twoOut = (await session.run(two.feedsRagged([rest[0]!, rest[2]!], [4, 2]))).logits as ort.Tensor
        expect(twoOut.dims[1]).toBe(3)
        for (const [i, r] of [0, 2].entries()) {
          const at = i * twoOut.dims[1]! + rest[r]!.length - 1 - (5 - twoOut.dims[1]!)
          const row = Array.from((twoOut.data as Float32Array).subarray(at * v, (at + 1) * v))
          const ref = await alone(r)
          expect(Math.max(...row.map((x, j) => Math.abs(x - ref[j]!)))).toBeLessThan(1e-4)
        }
      }, true)
    })

    it('gives the same tokens with the default slot step', async () => {
      const concat = await run(join(root, `${preset}-concat`))
      const slots = await run(join(root, `${preset}-slots`))
      expect(slots.results.map((r) => r.decoded)).toEqual(concat.results.map((r) => r.decoded))
    })

    it('takes spare rows and slots only inside the KV budget, with the same tokens', async () => {
      const slotStep = 4
      const free = await run(join(root, `${preset}-slots`), slotStep)
      // The budget: the most the run's live rows need at once for their next step (the scheduler's
      // rows × (longest + 1), rounded to the slot step). Spare rows (to 8) and slots (an eighth
      // more) go beyond it when unbounded.
      const live = (r: StepResult) => r.kvRows * Math.ceil((r.kvTokens + 1) / slotStep) * slotStep * free.bytesPerSlot
      const budget = Math.max(...free.results.map(live))
      expect(Math.max(...free.held)).toBeGreaterThan(budget)
      const bounded = await run(join(root, `${preset}-slots`), slotStep, budget)
      bounded.held.forEach((h, i) => expect(h, `step ${i}`).toBeLessThanOrEqual(budget))
      bounded.results.forEach((r, i) => expect(r.kvTokens).toBeLessThanOrEqual(bounded.capacities[i]))
      const concat = await run(join(root, `${preset}-concat`))
      expect(bounded.results.map((r) => r.decoded)).toEqual(concat.results.map((r) => r.decoded))
      // A budget below the live need: no spare at all (rows leaving refit the buffers too), and
      // still the same tokens.
      const tight = await run(join(root, `${preset}-slots`), slotStep, 1)
      tight.held.forEach((h, i) => expect(h, `step ${i}`).toBeLessThanOrEqual(live(tight.results[i])))
      expect(tight.held.some((h, i) => h < bounded.held[i])).toBe(true)
      expect(tight.results.map((r) => r.decoded)).toEqual(concat.results.map((r) => r.decoded))
    })
  })
}
