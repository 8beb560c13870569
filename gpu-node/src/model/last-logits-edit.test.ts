import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as ort from 'onnxruntime-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ONE_THREAD } from '../../test/support/one-thread.ts'
import { generateModel } from '../../tools/generate-model/generate-model.ts'
import { GraphBuilder } from '../../tools/generate-model/graph-builder.ts'
import { writeOnnxModel } from '../../tools/generate-model/onnx-writer.ts'
import { editedModelBytes } from './graph-edit.ts'
import { lastLogitsEdit, matchLastLogits, type LastLogitsMatch } from './last-logits-edit.ts'
import { readGraphIndex, type GraphIndex } from './onnx-graph-index.ts'
import { openModelSession } from './open-session.ts'
import { withFileReader } from './proto-file.ts'

/**
 * The last-logits edit's matcher and protobuf editor (last-logits-edit.ts): which graphs it
 * edits and the reason it gives for the others, that an edited session's logits for the kept
 * positions are bit for bit the unedited session's, and that the edit changes no byte of the
 * file but the graph's length, the LM head's first input, the logits output's shape and what it
 * appends. Token exactness through the engine is last-logits-edit-exact.test.ts's.
 */

const root = mkdtempSync(join(tmpdir(), 'zerolayer-last-logits-'))
beforeAll(async () => {
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny'), seed: 42 })
  await generateModel({ preset: 'tiny', outDir: join(root, 'tiny-keep'), seed: 42, logitsToKeep: true })
}, 60_000)
afterAll(() => rmSync(root, { recursive: true, force: true }))

const indexOf = (path: string): GraphIndex => withFileReader(path, readGraphIndex)
const matchOf = (path: string): LastLogitsMatch => matchLastLogits(indexOf(path))

type Head = 'plain' | 'softcap' | 'mixed' | 'other-op' | 'opset9'

/**
 * A graph whose "hidden states" are the ids and positions ([B,S,2]) and whose LM head is a MatMul
 * by a [2, 3] weight, so each position's logits are distinct and known. `softcap` puts the
 * per-element ops a real head may have after it (bias, soft cap, casts); `mixed` adds a
 * non-constant, `other-op` makes logits with no MatMul at all.
 */
function microHead(head: Head): string {
  const g = new GraphBuilder('micro-head', 1)
  const ids = g.input('input_ids', 'int64', ['batch', 'seq'])
  const positions = g.input('position_ids', 'int64', ['batch', 'seq'])
  const column = (x: string) => g.op('Unsqueeze', [g.op('Cast', [x], { to: { int: 1 } }), g.ints([2])])
  const hidden = g.op('Concat', [column(ids), column(positions)], { axis: { int: 2 } })
  const w = g.weight('lm_head', [2, 3], Float32Array.of(1, 2, 3, 0.5, -1, 0.25))
  const product = head === 'other-op' ? g.op('Mul', [hidden, g.floatScalar(2)]) : g.op('MatMul', [hidden, w])
  if (head === 'softcap') {
    const capped = g.op('Mul', [g.op('Tanh', [g.op('Div', [g.op('Add', [product, g.weight('bias', [3], Float32Array.of(0.1, 0.2, 0.3))]), g.floatScalar(30)])]), g.floatScalar(30)])
    g.op('Identity', [g.op('Cast', [capped], { to: { int: 1 } })], undefined, 'logits')
  } else if (head === 'mixed') g.op('Add', [product, hidden], undefined, 'logits')
  else g.op('Identity', [product], undefined, 'logits')
  g.output('logits', 'float32', ['batch', 'seq', head === 'other-op' ? 2 : 3])
  const path = join(root, `micro-${head}.onnx`)
  writeOnnxModel(path, { irVersion: 8, opsetVersion: head === 'opset9' ? 9 : 17, producerName: 'test', producerVersion: '1', graph: g.build() })
  return path
}

const feeds = (ids: number[][]) => ({
  input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.flat(), BigInt), [ids.length, ids[0]!.length]),
  position_ids: new ort.Tensor('int64', BigInt64Array.from(ids.flatMap((row) => row.map((_, i) => BigInt(i + 3)))), [ids.length, ids[0]!.length]),
})

/** Rows [b][position] of a [B, P, V] logits tensor. */
function rows(t: ort.Tensor): number[][][] {
  const [b, p, v] = t.dims as [number, number, number]
  const data = Array.from(t.data as Float32Array)
  return Array.from({ length: b }, (_, r) => Array.from({ length: p }, (_, i) => data.slice((r * p + i) * v, (r * p + i + 1) * v)))
}

describe('which graphs the last-logits edit applies to', () => {
  it("edits our generator's decoder, whose logits are MatMul(final norm, LM head)", () => {
    expect(matchOf(join(root, 'tiny', 'model.onnx'))).toMatchObject({ kind: 'edit', head: { opType: 'MatMul' } })
  })

  it('sees through a bias, a soft cap and casts after the MatMul', () => {
    expect(matchOf(microHead('softcap'))).toMatchObject({ kind: 'edit', head: { opType: 'MatMul' }, hidden: expect.stringMatching(/Concat/) })
  })

  it('leaves a graph that takes num_logits_to_keep itself alone', () => {
    expect(matchOf(join(root, 'tiny-keep', 'model.onnx'))).toEqual({ kind: 'declared' })
  })

  const kept: Array<[string, () => string, RegExp]> = [
    ['logits that mix in a non-constant after the head', () => microHead('mixed'), /made through Add, not a per-element op/],
    ['logits made without a MatMul', () => microHead('other-op'), /made through Concat, not a per-element op/],
    ['a model importing an opset before Slice took its bounds as inputs', () => microHead('opset9'), /opset 9/],
  ]
  for (const [what, file, why] of kept) {
    it(`keeps ${what}, saying why`, () => {
      const m = matchOf(file())
      expect(m.kind).toBe('keep')
      expect(m.kind === 'keep' ? m.why : '').toMatch(why)
    })
  }
})

describe('an edited session', () => {
  it('gives the last N positions of the unedited logits, bit for bit; 0 keeps them all', async () => {
    const path = microHead('softcap')
    const edited = await openModelSession(path, ONE_THREAD, { config: {} })
    const plain = await openModelSession(path, ONE_THREAD, { config: {}, lastLogitsEdit: false })
    expect(edited.logitsPath).toMatchObject({ lastOnly: true, edited: true })
    expect(plain.logitsPath).toMatchObject({ lastOnly: false, edited: false, why: expect.stringMatching(/switched off/) })
    expect(plain.session.inputNames).not.toContain('num_logits_to_keep')
    const ids = [
      [5, 7, 11, 13],
      [2, 4, 6, 8],
    ]
    const all = rows((await plain.session.run(feeds(ids))).logits!)
    for (const n of [1, 2, 4, 0]) {
      const kept = rows((await edited.session.run({ ...feeds(ids), num_logits_to_keep: new ort.Tensor('int64', BigInt64Array.of(BigInt(n)), []) })).logits!)
      expect(kept).toEqual(all.map((r) => r.slice(n === 0 ? 0 : -n)))
    }
  })
})

describe('the protobuf edit', () => {
  it("changes no byte but the graph's length, the head's first input, logits' shape and the appended records", () => {
    const src = join(root, 'tiny', 'model.onnx')
    const before = indexOf(src)
    const m = matchLastLogits(before)
    if (m.kind !== 'edit') throw new Error('expected an edit')
    const bytes = withFileReader(src, (f) => editedModelBytes(f, before, lastLogitsEdit(f, before, m)))
    const edited = join(root, 'tiny-edited.onnx')
    writeFileSync(edited, bytes)
    const after = indexOf(edited)
    const recordBytes = (path: string, index: GraphIndex) => withFileReader(path, (f) => index.graphFieldRecords.map((r) => f.bytes(r.tagStart, r.end)))
    const was = recordBytes(src, before)
    const now = recordBytes(edited, after)
    const logits = before.outputs.find((o) => o.name === 'logits')!
    const changed = new Set([m.head.record.tagStart, logits.recordStart])
    expect(now.length).toBe(was.length + 6)
    before.graphFieldRecords.forEach((r, i) => {
      if (!changed.has(r.tagStart)) expect(now[i]!.equals(was[i]!)).toBe(true)
    })
    const original = withFileReader(src, (f) => f.bytes(0, before.size))
    expect(bytes.subarray(0, before.graphRecord.tagStart).equals(original.subarray(0, before.graphRecord.tagStart))).toBe(true)
    expect(bytes.subarray(after.graphRecord.end).equals(original.subarray(before.graphRecord.end))).toBe(true)
    // The head: its first input now the slice, everything else as it was.
    const head = after.nodes[before.nodes.indexOf(m.head)]!
    expect({ ...head, record: undefined, inputs: head.inputs.slice(1) }).toEqual({ ...m.head, record: undefined, inputs: m.head.inputs.slice(1) })
    expect(head.inputs[0]).toBe('zerolayer/logits/kept_hidden')
    expect(after.outputs.find((o) => o.name === 'logits')!.dims).toEqual([logits.dims![0], undefined, logits.dims![2]])
    expect(after.inputs.at(-1)).toMatchObject({ name: 'num_logits_to_keep', elemType: 7, dims: [] })
    expect(after.nodes.slice(before.nodes.length).map((n) => `${n.opType}(${n.inputs.join()})`)).toEqual([
      'Neg(num_logits_to_keep)',
      'Constant()',
      'Reshape(zerolayer/logits/neg_keep,zerolayer/logits/one)',
      'Constant()',
      `Slice(${m.hidden},zerolayer/logits/starts,zerolayer/logits/ends,zerolayer/logits/one)`,
    ])
    expect(after.initializers).toEqual(before.initializers)
  })
})
