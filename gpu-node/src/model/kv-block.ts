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

/** Tokens a block holds: prefix-cache blocks hold PREFIX_BLOCK_TOKENS, a copy of a row's start (readBlock from 0) any number. */
export function blockTokens(io: SessionIo, block: KvBlock): number {
  return block.keys[0]!.length / (io.numKvHeads * io.headDim)
}

/** Tokens `blocks` hold, one after another. */
export function tokensIn(io: SessionIo, blocks: readonly KvBlock[]): number {
  return blocks.reduce((n, b) => n + blockTokens(io, b), 0)
}

/** Writes blocks, in order, into one row from token 0 (`layout` of the destination), skipping the first `skip`. */
export function writeBlocks(io: SessionIo, blocks: readonly KvBlock[], keys: readonly KvArray[], values: readonly KvArray[], layout: RowLayout, skip = 0): void {
  const { numKvHeads: h, headDim: d } = io
  let at = 0
  blocks.forEach((block, b) => {
    const count = blockTokens(io, block)
    const n = count * d
    if (b >= skip) {
      for (let layer = 0; layer < io.numLayers; layer++) {
        for (const [src, dst] of [[block.keys[layer], keys[layer]], [block.values[layer], values[layer]]] as const) {
          for (let head = 0; head < h; head++) dst.set(src.subarray(head * n, (head + 1) * n), layout(head, at))
        }
      }
    }
    at += count
  })
}
