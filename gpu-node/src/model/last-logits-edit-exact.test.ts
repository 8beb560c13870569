import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { API_SAMPLING_DEFAULTS } from '../../../shared/src/generation.ts'
import { exactnessRequests, openEditedEngine, textsAlone, textsTogether } from '../../test/support/edited-engine.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import type { EngineRequest } from '../engine/types.ts'
import { DEFAULT_MODEL_DIR } from '../config.ts'
import { readModelDir, type ModelDir } from './model-dir.ts'

/**
 * The last-logits edit (last-logits-edit.ts) must be exact: with it, a step's logits are computed
 * only for the positions it samples, and every greedy and seeded text, alone and batched, with
 * prompts prefilled in several chunks, is the text of the same graph loaded without it. On both
 * KV paths (a slot graph, and a concat graph the slot edit also applies to) and on the trained
 * default model, whose head is a 4-bit MatMulNBits. The control reads the position before the
 * last and must change the texts.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-last-logits-exact-'))
const GENERATED = ['tiny-slots', 'tiny-llama-slots', 'tiny-concat'] as const
beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny-slots'), seed: 42, kvCache: 'slots' })
  await generateModel({ preset: 'tiny-llama', outDir: join(root, 'tiny-llama-slots'), seed: 42, kvCache: 'slots' })
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny-concat'), seed: 42, kvCache: 'concat' })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** The greedy requests, and each again sampled at temperature 0.9 with its own seed. */
function requests(dir: ModelDir): EngineRequest[] {
  const greedy = exactnessRequests(dir)
  return [...greedy, ...greedy.map((r, i) => ({ ...r, id: `${r.id}-seeded`, sampling: { ...API_SAMPLING_DEFAULTS, temperature: 0.9, seed: 1000 + i } }))]
}

/**
 * A session whose logits are the position before each row's last: it asks for two positions and
 * hands back the first, as an off-by-one in the slice would.
 */
function positionBeforeLast(session: ort.InferenceSession): ort.InferenceSession {
  return new Proxy(session, {
    get(target, key) {
      if (key !== 'run') return Reflect.get(target, key)
      return async (feeds: Record<string, ort.Tensor>) => {
        const out = await target.run({ ...feeds, num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(2n), []) })
        const logits = out.logits as ort.Tensor
        const [b, p, v] = logits.dims as [number, number, number]
        const data = logits.data as Float32Array
        const first = new Float32Array(b * v)
        for (let r = 0; r < b; r++) first.set(data.subarray(r * p * v, r * p * v + v), r * v)
        return { ...out, logits: new ort.Tensor('float32', first, [b, 1, v]) }
      }
    },
  })
}

const cases: Array<[string, () => ModelDir]> = [
  ...GENERATED.map((name): [string, () => ModelDir] => [name, () => readModelDir(join(root, name))]),
  ['the trained default model (zl-code, 4-bit head)', () => readModelDir(DEFAULT_MODEL_DIR)],
]

for (const [name, dirOf] of cases) {
  describe(`the last-logits edit on ${name}`, () => {
    it('is applied, and gives alone and batched exactly the texts of the graph without it', async () => {
      const dir = dirOf()
      const reqs = requests(dir)
      const edited = await openEditedEngine(dir)
      const plain = await openEditedEngine(dir, { lastLogitsEdit: false })
      expect(edited.logitsPath).toMatchObject({ lastOnly: true, edited: true })
      expect(plain.logitsPath).toMatchObject({ lastOnly: false })
      const reference = await textsAlone(plain, reqs)
      expect(reference.every((t) => t.length > 0)).toBe(true)
      expect(await textsAlone(edited, reqs)).toEqual(reference)
      expect(await textsTogether(edited, reqs)).toEqual(reference)
      await Promise.all([edited.engine.close(), plain.engine.close()])
    })
  })
}

it('would catch logits read one position early (control)', async () => {
  const dir = readModelDir(join(root, 'tiny-slots'))
  const reqs = requests(dir)
  const reference = await textsAlone(await openEditedEngine(dir), reqs)
  expect(await textsAlone(await openEditedEngine(dir, { session: positionBeforeLast }), reqs)).not.toEqual(reference)
})
