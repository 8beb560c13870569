import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { EXTERNAL_ALIGN_BYTES, EXTERNAL_MIN_BYTES, layoutExternalData, writeExternalData } from './external-data.ts'

const root = mkdtempSync(join(tmpdir(), 'zerolayer-external-layout-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('external data layout', () => {
  it('keeps small tensors inline and starts every external one on a 4096-byte boundary, in order', () => {
    const lengths = [8, EXTERNAL_MIN_BYTES, 5000, EXTERNAL_MIN_BYTES - 1, 4096, 1, 20_000]
    const layout = layoutExternalData(lengths)
    expect(layout.map((p) => p?.offset)).toEqual([undefined, 0, 4096, undefined, 12288, undefined, 16384])
    layout.forEach((p, i) => p && expect(p.length).toBe(lengths[i]))
  })

  it('writes each tensor at its offset with zeros between', () => {
    const tensors = [1500, 6000, 2048].map((n, t) => Uint8Array.from({ length: n }, (_, i) => 1 + ((i + t) % 255)))
    const layout = layoutExternalData(tensors.map((b) => b.byteLength))
    const path = join(root, 'model.onnx_data')
    const size = writeExternalData(path, tensors.map((bytes, i) => ({ at: layout[i]!, bytes })))
    const file = readFileSync(path)
    expect(size).toBe(file.byteLength)
    expect(size).toBe(3 * EXTERNAL_ALIGN_BYTES + 2048) // the last tensor starts at 12288
    tensors.forEach((bytes, i) => expect(file.subarray(layout[i]!.offset, layout[i]!.offset + bytes.byteLength).equals(bytes)).toBe(true))
    expect(file.subarray(1500, EXTERNAL_ALIGN_BYTES).every((b) => b === 0)).toBe(true)
  })
})
