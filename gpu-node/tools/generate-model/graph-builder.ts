/**
 * Builds an ONNX graph one op at a time: fresh value names, constants as initializers (shared
 * when equal), weights drawn from the seeded per-tensor streams.
 */

import type { ElemType, OnnxAttribute, OnnxGraph, OnnxNode, OnnxTensor, OnnxValueInfo } from './onnx-writer.ts'
import { fillNormal, streamSeed } from './rng.ts'

export class GraphBuilder {
  private readonly nodes: OnnxNode[] = []
  private readonly initializers: OnnxTensor[] = []
  private readonly inputs: OnnxValueInfo[] = []
  private readonly outputs: OnnxValueInfo[] = []
  private readonly constants = new Map<string, string>()
  private readonly taken = new Set<string>()
  private counter = 0

  constructor(
    private readonly name: string,
    /** Model seed: each weight's values come from streamSeed(seed, weightName). */
    private readonly seed: number,
  ) {}

  /** Declares a graph input and returns its value name. */
  input(name: string, elemType: ElemType, shape: Array<number | string>): string {
    this.claim(name)
    this.inputs.push({ name, elemType, shape })
    return name
  }

  /** Declares an existing value (a node output of this exact name) as a graph output. */
  output(name: string, elemType: ElemType, shape: Array<number | string>): void {
    this.outputs.push({ name, elemType, shape })
  }

  /** Adds one node with a single fresh output (or the given output name) and returns that name. */
  op(opType: string, inputs: string[], attributes?: Record<string, OnnxAttribute>, outputName?: string): string {
    const out = outputName ?? this.fresh(opType)
    if (outputName !== undefined) this.claim(outputName)
    this.nodes.push({ opType, name: `${opType}_${this.nodes.length}`, inputs, outputs: [out], attributes })
    return out
  }

  /** Adds one node with `count` fresh outputs. */
  opMulti(opType: string, inputs: string[], count: number, attributes?: Record<string, OnnxAttribute>): string[] {
    const outs = Array.from({ length: count }, () => this.fresh(opType))
    this.nodes.push({ opType, name: `${opType}_${this.nodes.length}`, inputs, outputs: outs, attributes })
    return outs
  }

  /** A 1-D int64 constant (shapes, axes, slice bounds). */
  ints(values: number[]): string {
    return this.constant('int64', [values.length], BigInt64Array.from(values, (v) => BigInt(v)))
  }

  /** A 0-D int64 constant. */
  intScalar(value: number): string {
    return this.constant('int64', [], BigInt64Array.of(BigInt(value)))
  }

  /** A 0-D float32 constant. */
  floatScalar(value: number): string {
    return this.constant('float32', [], Float32Array.of(value))
  }

  /** A named float32 weight with N(mean, std²) entries from this tensor's own seeded stream. */
  normal(name: string, dims: number[], std: number, mean = 0): string {
    return this.weight(name, dims, this.normalData(name, dims, std, mean))
  }

  /** The values `normal` would store, for weights that need post-processing before `weight`. */
  normalData(name: string, dims: number[], std: number, mean = 0): Float32Array {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1))
    fillNormal(data, streamSeed(this.seed, name), std, mean)
    return data
  }

  /** A named float32 weight with given values. */
  weight(name: string, dims: number[], data: Float32Array): string {
    this.claim(name)
    this.initializers.push({ name, elemType: 'float32', dims, data })
    return name
  }

  build(): OnnxGraph {
    return { name: this.name, nodes: this.nodes, initializers: this.initializers, inputs: this.inputs, outputs: this.outputs }
  }

  private constant(elemType: 'float32' | 'int64', dims: number[], data: Float32Array | BigInt64Array): string {
    const key = `${elemType}:${dims.join('x')}:${Array.from(data as ArrayLike<number | bigint>, String).join(',')}`
    const known = this.constants.get(key)
    if (known !== undefined) return known
    const name = this.fresh('const')
    this.initializers.push({ name, elemType, dims, data })
    this.constants.set(key, name)
    return name
  }

  private fresh(prefix: string): string {
    let name: string
    do name = `/${prefix}_${this.counter++}`
    while (this.taken.has(name))
    this.taken.add(name)
    return name
  }

  private claim(name: string): void {
    if (this.taken.has(name)) throw new Error(`duplicate value name ${name}`)
    this.taken.add(name)
  }
}
