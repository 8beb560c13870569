import * as ort from 'onnxruntime-node'
import { describe, expect, it } from 'vitest'
import { floatsOf, halfToFloat, kvArray } from './tensor-dtype.ts'

describe('float16 → float32', () => {
  it('decodes the landmarks of IEEE binary16', () => {
    expect([0x0000, 0x8000, 0x3c00, 0xbc00, 0x3800, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x7c00, 0xfc00].map(halfToFloat)).toEqual([
      0, -0, 1, -1, 0.5, 65504, 2 ** -24, 1023 * 2 ** -24, 2 ** -14, Infinity, -Infinity,
    ])
    expect(halfToFloat(0x7e00)).toBeNaN()
  })

  it('is exact and order-preserving over every finite half (each is a float32)', () => {
    // Negative halves from the most negative up, then positive ones: their values must increase
    // (only -0 and +0 are equal).
    const order = [...Array.from({ length: 0x7c00 }, (_, i) => 0xfbff - i), ...Array.from({ length: 0x7c00 }, (_, i) => i)]
    const values = order.map(halfToFloat)
    expect(values.filter((f) => Math.fround(f) !== f)).toEqual([])
    expect(values.filter((f, i) => i > 0 && !(f > values[i - 1]!) && !(f === 0 && values[i - 1] === 0))).toEqual([])
  })

  it("reads a float16 tensor's slice as float32 and a float32 tensor's as a view", () => {
    const half = new ort.Tensor('float16', Uint16Array.from([0x3c00, 0xc000, 0x3555, 0x7bff]), [4])
    expect(Array.from(floatsOf(half, 1, 3))).toEqual([-2, halfToFloat(0x3555), 65504])
    const data = Float32Array.from([1, 2, 3])
    expect(floatsOf(new ort.Tensor('float32', data, [3]), 1, 2).buffer).toBe(data.buffer)
    expect(() => floatsOf(new ort.Tensor('int32', Int32Array.from([1]), [1]), 0, 1)).toThrow(/not a float type/)
  })

  it('allocates KV buffers of the element width', () => {
    expect(kvArray('float16', 3)).toBeInstanceOf(Uint16Array)
    expect(kvArray('float32', 3)).toBeInstanceOf(Float32Array)
  })
})
