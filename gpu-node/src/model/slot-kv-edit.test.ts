import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import { GraphBuilder } from '../../tools/generate-model/graph-builder.ts'
import { writeOnnxModel } from '../../tools/generate-model/onnx-writer.ts'
import { readModelDir } from './model-dir.ts'
import { readGraphIndex, type GraphIndex } from './onnx-graph-index.ts'
import { openModelSession } from './open-session.ts'
import { withFileReader } from './proto-file.ts'
import { editedModelBytes } from './graph-edit.ts'
import { matchSlotKv, slotKvEdit, type SlotKvMatch } from './slot-kv-edit.ts'

/**
 * The slot KV edit's matcher and protobuf editor (slot-kv-edit.ts): which graphs it edits, which
 * it leaves on the concat path and the reason it gives, and that an edit changes no byte of the
 * file but the graph's length, the replaced outputs and the appended nodes. Token exactness is
 * slot-kv-edit-exact.test.ts's.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-slot-kv-match-'))
beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny-concat'), seed: 42, kvCache: 'concat' })
  await generateModel({ preset: 'tiny-derived-positions', outDir: join(root, 'tiny-derived-positions'), seed: 42 })
  await generateModel({ preset: 'tiny-optimum-legacy', outDir: join(root, 'tiny-optimum-legacy'), seed: 42 })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

const indexOf = (path: string): GraphIndex => withFileReader(path, readGraphIndex)
const matchOf = (path: string, config = {}): SlotKvMatch => matchSlotKv(indexOf(path), config)

type Variant = 'plain' | 'cast' | 'axis1' | 'reversed' | 'add' | 'if' | 'no-positions'

/**
 * A one-layer graph with the decoder's interface whose "new K/V" are the ids and positions
 * themselves ([B,1,S,2]: id, position), so a test can read them back exactly. The value always
 * passes through Identity nodes on both sides of its Concat; `variant` shapes the key's.
 */
function microDecoder(variant: Variant): string {
  const g = new GraphBuilder('micro', 1)
  const ids = g.input('input_ids', 'int64', ['batch', 'seq'])
  g.input('attention_mask', 'int64', ['batch', 'total'])
  const positions = variant === 'no-positions' ? ids : g.input('position_ids', 'int64', ['batch', 'seq'])
  const pastKey = g.input('past_key_values.0.key', 'float32', ['batch', 1, 'past', 2])
  const pastValue = g.input('past_key_values.0.value', 'float32', ['batch', 1, 'past', 2])
  const column = (x: string) => g.op('Unsqueeze', [g.op('Cast', [x], { to: { int: 1 } }), g.ints([1, 3])])
  const newKey = g.op('Concat', [column(ids), column(positions)], { axis: { int: 3 } })
  const newValue = g.op('Mul', [newKey, g.floatScalar(2)])
  const fp16 = (x: string) => g.op('Cast', [x], { to: { int: 10 } })
  if (variant === 'cast') g.op('Cast', [g.op('Concat', [fp16(pastKey), fp16(newKey)], { axis: { int: -2 } })], { to: { int: 1 } }, 'present.0.key')
  else if (variant === 'axis1') g.op('Concat', [pastKey, newKey], { axis: { int: 1 } }, 'present.0.key')
  else if (variant === 'reversed') g.op('Concat', [newKey, pastKey], { axis: { int: 2 } }, 'present.0.key')
  else if (variant === 'add') g.op('Add', [pastKey, newKey], undefined, 'present.0.key')
  else g.op('Concat', [pastKey, newKey], { axis: { int: 2 } }, 'present.0.key')
  const value = g.op('Concat', [g.op('Identity', [pastValue]), newValue], { axis: { int: 2 } })
  g.op('Identity', [value], undefined, 'present.0.value')
  // Not a loadable If (no branches): the matcher only needs to see one in the top-level graph.
  if (variant === 'if') g.op('If', [g.op('Cast', [ids], { to: { int: 9 } })])
  g.op('Unsqueeze', [g.op('Cast', [ids], { to: { int: 1 } }), g.ints([2])], undefined, 'logits')
  g.output('logits', 'float32', ['batch', 'seq', 1])
  g.output('present.0.key', 'float32', ['batch', 1, 'total', 2])
  g.output('present.0.value', 'float32', ['batch', 1, 'total', 2])
  const path = join(root, `micro-${variant}.onnx`)
  writeOnnxModel(path, { irVersion: 8, opsetVersion: 17, producerName: 'test', producerVersion: '1', graph: g.build() })
  return path
}

describe('which graphs the slot KV edit applies to', () => {
  it("edits our generator's concat layout, every layer's key and value", () => {
    const m = matchOf(join(root, 'tiny-concat', 'model.onnx'))
    expect(m.kind).toBe('edit')
    if (m.kind !== 'edit') return
    expect(m.layers).toBe(4)
    expect(m.outputs.map((o) => `${o.present}→${o.name}`)).toEqual([0, 1, 2, 3].flatMap((i) => [`present.${i}.key→new_key_values.${i}.key`, `present.${i}.value→new_key_values.${i}.value`]))
    expect(m.outputs[0]).toMatchObject({ elemType: 1, dims: ['batch_size', 4, undefined, 64] })
    expect(m.outputs[0]!.castTo).toBeUndefined()
  })

  it('sees through Identity and Cast nodes, and casts the new K/V back to the past type', async () => {
    const path = microDecoder('cast')
    const m = matchOf(path)
    expect(m).toMatchObject({ kind: 'edit', outputs: [{ name: 'new_key_values.0.key', elemType: 1, castTo: 1 }, { name: 'new_key_values.0.value', elemType: 1 }] })
    const { session, kvPath } = await openModelSession(path, ONE_THREAD, { config: {} })
    expect(kvPath).toMatchObject({ kvCache: 'slots', edited: true })
    expect(session.outputNames).toEqual(['logits', 'new_key_values.0.key', 'new_key_values.0.value'])
    const past = new ort.Tensor('float32', Float32Array.from({ length: 6 }, (_, i) => i + 0.1), [1, 1, 3, 2])
    const out = await session.run({
      input_ids: new ort.Tensor('int64', BigInt64Array.of(5n, 7n), [1, 2]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(5).fill(1n), [1, 5]),
      position_ids: new ort.Tensor('int64', BigInt64Array.of(3n, 4n), [1, 2]),
      'past_key_values.0.key': past,
      'past_key_values.0.value': past,
    })
    // Only the step's own K/V, [1, 1, 2, 2] float32: (id, position) per token; V = 2 K.
    expect({ type: out['new_key_values.0.key']!.type, dims: out['new_key_values.0.key']!.dims }).toEqual({ type: 'float32', dims: [1, 1, 2, 2] })
    expect(Array.from(out['new_key_values.0.key']!.data as Float32Array)).toEqual([5, 3, 7, 4])
    expect(Array.from(out['new_key_values.0.value']!.data as Float32Array)).toEqual([10, 6, 14, 8])
  })

  it('leaves a graph already on the slot interface alone', () => {
    expect(matchOf('models/tiny/model.onnx')).toEqual({ kind: 'slots' })
  })

  const kept: Array<[string, () => string, RegExp]> = [
    ['a graph without position_ids (tiny-derived-positions)', () => join(root, 'tiny-derived-positions', 'model.onnx'), /takes no position_ids.*cache capacity/],
    ['a merged decoder with use_cache_branch (tiny-optimum-legacy)', () => join(root, 'tiny-optimum-legacy', 'model.onnx'), /merged decoder/],
    ['a graph with an If node', () => microDecoder('if'), /merged decoder/],
    ['a graph without position_ids (micro)', () => microDecoder('no-positions'), /takes no position_ids/],
    ['a Concat on another axis', () => microDecoder('axis1'), /present\.0\.key is a Concat of 2 inputs on axis 1/],
    ['a Concat with the past second', () => microDecoder('reversed'), /present\.0\.key is a Concat whose first input is \/Concat_\d+, not past_key_values\.0\.key/],
    ['a present made by another op', () => microDecoder('add'), /present\.0\.key is made by Add, not Concat\(past_key_values\.0\.key, new\)/],
  ]
  for (const [what, file, why] of kept) {
    it(`keeps ${what} on the concat path, saying why`, () => {
      const m = matchOf(file())
      expect(m.kind).toBe('concat')
      expect(m.kind === 'concat' ? m.why : '').toMatch(why)
    })
  }

  it('keeps a model with a sliding window on the concat path', () => {
    const m = matchOf(join(root, 'tiny-concat', 'model.onnx'), { slidingWindow: 4096 })
    expect(m).toEqual({ kind: 'concat', why: expect.stringMatching(/sliding_window 4096/) })
  })

  it('still loads and runs a graph it keeps on the concat path, reporting the reason', async () => {
    const dir = readModelDir(join(root, 'tiny-derived-positions'))
    const { session, kvPath } = await openModelSession(dir.onnxPath, ONE_THREAD, { config: dir.config })
    expect(kvPath).toMatchObject({ kvCache: 'concat', edited: false, why: expect.stringMatching(/position_ids/) })
    expect(session.outputNames).toContain('present.0.key')
  })
})

describe('the protobuf edit', () => {
  it("changes no byte but the graph's length, the replaced outputs and the appended nodes", () => {
    const src = join(root, 'tiny-concat', 'model.onnx')
    const edited = join(root, 'tiny-concat-edited.onnx')
    const before = indexOf(src)
    const m = matchSlotKv(before)
    if (m.kind !== 'edit') throw new Error('expected an edit')
    const bytes = withFileReader(src, (f) => editedModelBytes(f, before, slotKvEdit(before, m.outputs)))
    writeFileSync(edited, bytes)
    const after = indexOf(edited)
    const recordBytes = (path: string, index: GraphIndex) => withFileReader(path, (f) => index.graphFieldRecords.map((r) => f.bytes(r.tagStart, r.end)))
    const was = recordBytes(src, before)
    const now = recordBytes(edited, after)
    const replaced = new Set(before.outputs.filter((o) => o.name.startsWith('present.')).map((o) => o.recordStart))
    expect(now.length).toBe(was.length + m.outputs.length)
    before.graphFieldRecords.forEach((r, i) => {
      if (!replaced.has(r.tagStart)) expect(now[i]!.equals(was[i]!)).toBe(true)
    })
    // Outside the graph field: the same bytes before and after it.
    const original = withFileReader(src, (f) => f.bytes(0, before.size))
    expect(bytes.subarray(0, before.graphRecord.tagStart).equals(original.subarray(0, before.graphRecord.tagStart))).toBe(true)
    expect(bytes.subarray(after.graphRecord.end).equals(original.subarray(before.graphRecord.end))).toBe(true)
    expect(after.outputs.map((o) => o.name)).toEqual(['logits', ...m.outputs.map((o) => o.name)])
    expect(after.nodes.slice(before.nodes.length).map((n) => `${n.opType}(${n.inputs.join()})→${n.outputs.join()}`)).toEqual(m.outputs.map((o) => `Identity(${o.from})→${o.name}`))
    expect(after.initializers).toEqual(before.initializers)
  })
})
