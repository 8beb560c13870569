import { describe, expect, it } from 'vitest'
import { batchCouplingOps, readGraphOps } from './graph-ops.ts'

describe('readGraphOps', () => {
  it("lists the operators of a graph's nodes, skipping its weights", () => {
    const ops = readGraphOps('models/tiny/model.onnx')
    for (const op of ['Gather', 'MatMul', 'Softmax', 'LayerNormalization']) expect(ops).toContain(op)
    expect(batchCouplingOps('models/tiny/model.onnx')).toEqual([])
  })

  it('refuses a file that is not an ONNX protobuf', () => {
    expect(() => readGraphOps('package.json')).toThrow(/not an ONNX protobuf/)
  })
})
