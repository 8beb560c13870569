import { mkdtempSync, renameSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Engine } from '../engine/engine.ts'
import { generateText } from '../../test/support/generate-text.ts'
import { exactnessRequests, openEditedEngine, textsAlone, textsTogether } from '../../test/support/edited-engine.ts'
import { EXTERNAL_DATA_FILE, generateModel } from '../../tools/generate-model/generate-model.ts'
import { loadModel } from './load-model.ts'
import { readModelDir, type ModelDir } from './model-dir.ts'
import { SlotKvCache } from './slot-kv-cache.ts'

/**
 * The slot KV edit (slot-kv-edit.ts) must be exact: an Optimum-layout (concat) graph edited at
 * load onto the slot cache gives, for greedy requests of different lengths, alone and batched
 * together, exactly the texts of the same weights generated in the slot layout and of the
 * unedited concat path. Each preset is generated here three ways with one seed: slots, concat,
 * and concat with external data. The controls (a wrong position, an unmasked empty slot) must
 * change the texts, proving the comparison can fail.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-slot-kv-edit-'))
const PRESETS = ['tiny', 'tiny-llama'] as const
const path = (preset: string, layout: 'slots' | 'concat' | 'concat-external') => join(root, `${preset}-${layout}`)

beforeAll(async () => {
  for (const preset of PRESETS) {
    await generateModel({ preset, outDir: path(preset, 'slots'), seed: 42, kvCache: 'slots' })
    await generateModel({ preset, outDir: path(preset, 'concat'), seed: 42, kvCache: 'concat' })
  }
  await generateModel({ preset: 'tiny', outDir: path('tiny', 'concat-external'), seed: 42, kvCache: 'concat', externalData: true })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** The slot layout's classic bug: every row at the longest row's position. */
class SharedPositions extends SlotKvCache {
  override decodeFeeds() {
    const feeds = super.decodeFeeds()
    feeds.position_ids = new ort.Tensor('int64', new BigInt64Array(this.rows).fill(BigInt(Math.max(...this.lens))), [this.rows, 1])
    return feeds
  }
}

/** A mask that lets every row see the first empty slot after its tokens (zeros, or a departed row's K/V). */
class UnmaskedSlot extends SlotKvCache {
  override feeds(ids: BigInt64Array, s: number) {
    const feeds = super.feeds(ids, s)
    const mask = feeds.attention_mask!.data as BigInt64Array
    const width = this.capacity + s
    for (let r = 0; r < this.rows; r++) if (this.lens[r]! < this.capacity) mask[r * width + this.lens[r]!] = 1n
    return feeds
  }
}

for (const preset of PRESETS) {
  describe(`the slot KV edit on ${preset} in the concat (Optimum) layout`, () => {
    let slotsDir: ModelDir
    let concatDir: ModelDir
    beforeAll(() => {
      slotsDir = readModelDir(path(preset, 'slots'))
      concatDir = readModelDir(path(preset, 'concat'))
    })

    it('is applied, and the session then has the slot interface', async () => {
      const edited = await openEditedEngine(concatDir)
      expect(edited.kvPath).toMatchObject({ kvCache: 'slots', edited: true, why: expect.stringContaining('position_ids') })
      expect(edited.io).toMatchObject({ kvCache: 'slots', presentKey: expect.arrayContaining(['new_key_values.0.key']) })
      const off = await openEditedEngine(concatDir, { slotKvEdit: false })
      expect(off.kvPath).toMatchObject({ kvCache: 'concat', edited: false, why: expect.stringContaining('SLOT_KV_EDIT=0') })
      expect(off.io.kvCache).toBe('concat')
    })

    it('gives, alone and batched, exactly the texts of the slot layout and of the unedited concat path', async () => {
      const reqs = exactnessRequests(concatDir)
      const slotsAlone = await textsAlone(await openEditedEngine(slotsDir), reqs)
      const concatAlone = await textsAlone(await openEditedEngine(concatDir, { slotKvEdit: false }), reqs)
      const editedAlone = await textsAlone(await openEditedEngine(concatDir), reqs)
      const editedTogether = await textsTogether(await openEditedEngine(concatDir), reqs)
      expect(slotsAlone.every((t) => t.length > 0)).toBe(true)
      expect(concatAlone).toEqual(slotsAlone)
      expect(editedAlone).toEqual(slotsAlone)
      expect(editedTogether).toEqual(slotsAlone)
    })

    it('would catch a wrong position or an unmasked empty slot (controls)', async () => {
      const reqs = exactnessRequests(concatDir)
      const reference = await textsAlone(await openEditedEngine(concatDir), reqs)
      expect(await textsTogether(await openEditedEngine(concatDir, { cache: (io) => new SharedPositions(io) }), reqs)).not.toEqual(reference)
      expect(await textsTogether(await openEditedEngine(concatDir, { cache: (io) => new UnmaskedSlot(io) }), reqs)).not.toEqual(reference)
    })
  })
}

describe('the slot KV edit on a graph with external data (model.onnx_data)', () => {
  it('loads from the edited bytes, finds the weights beside model.onnx, and gives the inline texts', async () => {
    const external = readModelDir(path('tiny', 'concat-external'))
    const reqs = exactnessRequests(external)
    const edited = await openEditedEngine(external)
    expect(edited.kvPath).toMatchObject({ kvCache: 'slots', edited: true })
    expect(await textsTogether(edited, reqs)).toEqual(await textsAlone(await openEditedEngine(readModelDir(path('tiny', 'slots'))), reqs))
  })

  it('runs the same way through the worker-thread runner (the data file outside the working directory)', async () => {
    const { runner, tokenizer } = await loadModel({ intraOpThreads: 1, modelDir: path('tiny', 'concat-external'), executionProvider: 'cpu', kvBudgetBytes: 1 << 30 })
    expect(runner.info.kvPath).toMatchObject({ kvCache: 'slots', edited: true })
    const engine = new Engine({ runner, decoder: tokenizer, limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes: 1 << 30, prefillChunkTokens: 16 } })
    const reqs = exactnessRequests(readModelDir(path('tiny', 'slots'))).slice(0, 4)
    const reference = await textsAlone(await openEditedEngine(readModelDir(path('tiny', 'slots'))), reqs)
    expect(await Promise.all(reqs.map((r) => generateText(engine, r)))).toEqual(reference)
    await engine.close()
  })

  it('fails to load with a message naming model.onnx and the missing data file', async () => {
    const dir = path('tiny', 'concat-external')
    renameSync(join(dir, EXTERNAL_DATA_FILE), join(dir, 'moved'))
    try {
      await expect(loadModel({ intraOpThreads: 1, modelDir: dir, executionProvider: 'cpu', kvBudgetBytes: 1 << 30 })).rejects.toThrow(/model\.onnx: ONNX Runtime could not load it .*model\.onnx_data/)
    } finally {
      renameSync(join(dir, 'moved'), join(dir, EXTERNAL_DATA_FILE))
    }
  })
})
