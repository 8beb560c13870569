import type { SessionIo } from './session-io.ts'
import { kvArray, type KvArray } from './tensor-dtype.ts'

/**
 * One prefix-cache block's KV, as the worker keeps it: per layer, K and V of `tokens` tokens,
 * [kvHeads, tokens, headDim] of the session's KV type. Blocks are copies, never views: the
 * batch rows they came from move and go.
 */
export interface KvBlock {
  keys: KvArray[]
  values: KvArray[]
}

/** Where one row's token `t` starts in a [rows, kvHeads, width, headDim] buffer: `at(head, t)`. */
export type RowLayout = (head: number, token: number) => number

/**
 * Copies `count` tokens from `first` of one row (per layer buffers, `layout`) into a block:
 * `into`'s buffers when given (an evicted slot's, so a full cache saves without allocating),
 * else new ones.
 */
export function readBlock(io: SessionIo, keys: readonly KvArray[], values: readonly KvArray[], layout: RowLayout, first: number, count: number, into?: KvBlock): KvBlock {
  const { numKvHeads: h, headDim: d } = io
  const copy = (src: KvArray, layer: number, kind: 'keys' | 'values'): KvArray => {
    const reuse = into?.[kind][layer]
    const out = reuse && reuse.length === h * count * d ? reuse : kvArray(io.kvType, h * count * d)
    for (let head = 0; head < h; head++) {
      const at = layout(head, first)
      out.set(src.subarray(at, at + count * d), head * count * d)
    }
    return out
  }
  return { keys: keys.map((k, i) => copy(k, i, 'keys')), values: values.map((v, i) => copy(v, i, 'values')) }
}

/** Writes blocks of `blockTokens` tokens, in order, into one row from token 0 (`layout` of the destination), skipping the first `skip`. */
export function writeBlocks(io: SessionIo, blocks: readonly KvBlock[], blockTokens: number, keys: readonly KvArray[], values: readonly KvArray[], layout: RowLayout, skip = 0): void {
  const { numKvHeads: h, headDim: d } = io
  const n = blockTokens * d
  blocks.forEach((block, b) => {
    if (b < skip) return
    for (let layer = 0; layer < io.numLayers; layer++) {
      for (const [src, dst] of [[block.keys[layer], keys[layer]], [block.values[layer], values[layer]]] as const) {
        for (let head = 0; head < h; head++) dst.set(src.subarray(head * n, (head + 1) * n), layout(head, b * blockTokens))
      }
    }
  })
}
