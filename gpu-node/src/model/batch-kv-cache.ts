import * as ort from 'onnxruntime-node'
import type { SessionIo } from './session-io.ts'
import { readBlock, tokensIn, writeBlocks, type KvBlock } from './kv-block.ts'
import { kvArray, type KvArray, type KvType } from './tensor-dtype.ts'

/** One layer's K and V, [rows, kvHeads, tokens, headDim] of the session's KV type. */
export interface LayerKv {
  key: ort.Tensor
  value: ort.Tensor
}

/** The batch-resident KV cache as ModelStep drives it (this file's concat cache, or slot-kv-cache.ts). */
export interface BatchCache {
  seqIds: number[]
  lens: number[]
  nextTokens: number[]
  readonly rows: number
  /** KV columns a decode step attends over (reported as the step's kvTokens). */
  readonly width: number
  decodeFeeds(): Record<string, ort.Tensor>
  acceptDecode(outputs: ort.InferenceSession.ReturnType): void
  relayout(remove: ReadonlySet<number>, joins?: readonly KvJoin[]): void
  /** A copy of row `seqId`'s KV for tokens [from, from + count) (a prefix-cache block). */
  readBlock(seqId: number, from: number, count: number, into?: KvBlock): KvBlock
  /** A copy of row `seqId`'s first `count` tokens' KV, for another sequence to start from (runner.ts SequenceStart `donor`). */
  readRow(seqId: number, count: number): KvBlock
}

/** One sequence's own B=1 cache between its prefill chunks (chunked prefill is exact). */
export interface PrefillCache {
  readonly len: number
  /** Feeds for the next `s` prompt tokens ([1, s]). */
  feeds(ids: BigInt64Array, s: number): Record<string, ort.Tensor>
  accept(outputs: ort.InferenceSession.ReturnType, s: number): void
  join(seqId: number, nextToken: number): KvJoin
  /** Starts an empty cache from blocks (kv-block.ts): its first tokens, as many as they hold. */
  startFrom(blocks: readonly KvBlock[]): void
}

/** PrefillCache of a concat model: each chunk's presents are the next chunk's past. */
export class ConcatPrefill implements PrefillCache {
  private layers: LayerKv[]
  len = 0

  constructor(private readonly io: SessionIo) {
    this.layers = emptyLayers(io, 1)
  }

  feeds(ids: BigInt64Array, s: number): Record<string, ort.Tensor> {
    const mask = new BigInt64Array(this.len + s).fill(1n)
    const positions = BigInt64Array.from({ length: s }, (_, i) => BigInt(this.len + i))
    return modelFeeds(this.io, ids, [1, s], mask, this.len + s, positions, this.layers, this.len)
  }

  accept(outputs: ort.InferenceSession.ReturnType, s: number): void {
    this.layers = presentsOf(this.io, outputs)
    this.len += s
  }

  join(seqId: number, nextToken: number): KvJoin {
    return { seqId, nextToken, len: this.len, layers: this.layers, row: 0 }
  }

  startFrom(blocks: readonly KvBlock[]): void {
    const { numKvHeads: h, headDim: d, kvType } = this.io
    const n = tokensIn(this.io, blocks)
    const keys = this.layers.map(() => kvArray(kvType, h * n * d))
    const values = this.layers.map(() => kvArray(kvType, h * n * d))
    writeBlocks(this.io, blocks, keys, values, (head, t) => (head * n + t) * d)
    this.layers = keys.map((k, i) => ({ key: new ort.Tensor(kvType, k, [1, h, n, d]), value: new ort.Tensor(kvType, values[i], [1, h, n, d]) }))
    this.len = n
  }
}

/**
 * The batch-resident, left-padded KV cache (FACTS.md: per-sequence caches gathered every step
 * cost more than the model step). Row b holds its `lens[b]` real tokens in the last columns;
 * pad columns have attention_mask 0. Each step's `present.*` become the next step's
 * `past_key_values.*` without a copy; data is re-laid (copied) only when rows join — then
 * all-pad leading columns are trimmed — and moved up in place when rows leave.
 */
export class BatchKvCache implements BatchCache {
  seqIds: number[] = []
  /** Real tokens in the cache per row. */
  lens: number[] = []
  /** The token each row feeds at the next decode step (its last sampled token). */
  nextTokens: number[] = []
  /** Padded length of every row. */
  width = 0
  layers: LayerKv[]

  constructor(private readonly io: SessionIo) {
    this.layers = emptyLayers(io, 0)
  }

  get rows(): number {
    return this.seqIds.length
  }

  /** Feeds for one decode step: one new token per row, at position lens[b]. */
  decodeFeeds(): Record<string, ort.Tensor> {
    const b = this.rows
    const total = this.width + 1
    const mask = new BigInt64Array(b * total)
    const positions = new BigInt64Array(b)
    for (let r = 0; r < b; r++) {
      mask.fill(1n, r * total + (this.width - this.lens[r]), (r + 1) * total)
      positions[r] = BigInt(this.lens[r])
    }
    const ids = BigInt64Array.from(this.nextTokens, (t) => BigInt(t))
    return modelFeeds(this.io, ids, [b, 1], mask, total, positions, this.layers, this.width)
  }

  /** Takes the step's presents as the new cache (zero-copy) and grows every row by one. */
  acceptDecode(outputs: ort.InferenceSession.ReturnType): void {
    this.layers = presentsOf(this.io, outputs)
    this.width++
    for (let r = 0; r < this.rows; r++) this.lens[r]++
  }

  /**
   * Drops rows and appends joining sequences in a single copy, trimming leading columns that
   * every remaining row has as padding. A joining sequence's KV is row `row` of its prefill
   * tensors (left-padded to their own width when several prompts were prefilled together).
   */
  relayout(remove: ReadonlySet<number>, joins: readonly KvJoin[] = []): void {
    const keep: number[] = []
    for (let r = 0; r < this.rows; r++) if (!remove.has(this.seqIds[r])) keep.push(r)
    if (keep.length === this.rows && joins.length === 0) return
    if (joins.length === 0) return this.compact(keep)
    const lens = [...keep.map((r) => this.lens[r]), ...joins.map((j) => j.len)]
    const width = lens.reduce((m, l) => Math.max(m, l), 0)
    const { numKvHeads: h, headDim: d } = this.io
    const rows = lens.length
    const relay = (old: ort.Tensor, joined: (j: KvJoin) => ort.Tensor): ort.Tensor => {
      const dst = kvArray(this.io.kvType, rows * h * width * d)
      const src = old.data as KvArray
      keep.forEach((r, to) => copyRow(src, r, this.width, dst, to, width, this.lens[r], h, d))
      joins.forEach((j, i) => {
        const t = joined(j)
        copyRow(t.data as KvArray, j.row, t.dims[2], dst, keep.length + i, width, j.len, h, d, j.start)
      })
      return new ort.Tensor(this.io.kvType, dst, [rows, h, width, d])
    }
    this.layers = this.layers.map((layer, i) => ({
      key: relay(layer.key, (j) => j.layers[i].key),
      value: relay(layer.value, (j) => j.layers[i].value),
    }))
    this.seqIds = [...keep.map((r) => this.seqIds[r]), ...joins.map((j) => j.seqId)]
    this.nextTokens = [...keep.map((r) => this.nextTokens[r]), ...joins.map((j) => j.nextToken)]
    this.lens = lens
    this.width = width
  }

  readBlock(seqId: number, from: number, count: number, into?: KvBlock): KvBlock {
    const r = this.seqIds.indexOf(seqId)
    if (r < 0) throw new Error(`no batch row for sequence ${seqId}`)
    const { numKvHeads: h, headDim: d } = this.io
    const width = this.width
    const first = width - this.lens[r]
    const data = (t: ort.Tensor) => t.data as KvArray
    return readBlock(this.io, this.layers.map((l) => data(l.key)), this.layers.map((l) => data(l.value)), (head, t) => ((r * h + head) * width + first + t) * d, from, count, into)
  }

  readRow(seqId: number, count: number): KvBlock {
    return this.readBlock(seqId, 0, count)
  }

  /**
   * Rows leaving without rows joining: the kept rows move up inside the same buffers (each row
   * is one contiguous block, so this is a memmove of the rows after the first one removed, in
   * memory that is already warm) and the tensors become views of the first rows. A fresh copy
   * would touch fresh pages for the whole cache — at B=32 and 128 tokens, about as long as a
   * decode step. Leading pad columns stay until the next copy: they are masked, so cost only a
   * little compute.
   */
  private compact(keep: number[]): void {
    this.layers = this.layers.map((layer) => ({ key: compactTensor(layer.key, keep), value: compactTensor(layer.value, keep) }))
    this.seqIds = keep.map((r) => this.seqIds[r])
    this.nextTokens = keep.map((r) => this.nextTokens[r])
    this.lens = keep.map((r) => this.lens[r])
    if (keep.length === 0) this.width = 0
  }
}

/** Row `keep[i]` moved to row i in place; the tensor of the first keep.length rows, as a view. */
function compactTensor(t: ort.Tensor, keep: number[]): ort.Tensor {
  const [, h, width, d] = t.dims as [number, number, number, number]
  const block = h * width * d
  const data = t.data as KvArray
  keep.forEach((from, to) => {
    if (from !== to) data.copyWithin(to * block, from * block, (from + 1) * block)
  })
  return new ort.Tensor(t.type as KvType, data.subarray(0, keep.length * block), [keep.length, h, keep.length === 0 ? 0 : width, d])
}

/** A sequence entering the batch: its first sampled token and its KV from prefill. */
export interface KvJoin {
  seqId: number
  nextToken: number
  /** Real tokens in its KV. */
  len: number
  /** The prefill run's KV; this sequence is row `row` of them, right-aligned unless `start` says. */
  layers: LayerKv[]
  row: number
  /** Column of the sequence's first token (default: dims[2] − len, right-aligned). */
  start?: number
  /** Prefix-cache blocks known to hold its tokens (SlotKvCache's `known`), carried to its new row. */
  blocks?: readonly KvBlock[]
}

/** Copies `len` columns of row `from` (width `fromWidth`; by default its last ones) into the right end of row `to`. */
function copyRow(src: KvArray, from: number, fromWidth: number, dst: KvArray, to: number, toWidth: number, len: number, h: number, d: number, first = fromWidth - len): void {
  for (let head = 0; head < h; head++) {
    const s = ((from * h + head) * fromWidth + first) * d
    const t = ((to * h + head) * toWidth + (toWidth - len)) * d
    dst.set(src.subarray(s, s + len * d), t)
  }
}

export function emptyLayers(io: SessionIo, rows: number): LayerKv[] {
  const shape = [rows, io.numKvHeads, 0, io.headDim]
  return Array.from({ length: io.numLayers }, () => ({
    key: new ort.Tensor(io.kvType, kvArray(io.kvType, 0), shape),
    value: new ort.Tensor(io.kvType, kvArray(io.kvType, 0), shape),
  }))
}

export function presentsOf(io: SessionIo, outputs: ort.InferenceSession.ReturnType): LayerKv[] {
  return io.presentKey.map((k, i) => ({ key: outputs[k] as ort.Tensor, value: outputs[io.presentValue[i]] as ort.Tensor }))
}

/** The feed dictionary every run uses; optional inputs only when the session declares them. */
export function modelFeeds(
  io: SessionIo,
  ids: BigInt64Array,
  idsShape: [number, number],
  mask: BigInt64Array,
  maskWidth: number,
  positions: BigInt64Array,
  past: LayerKv[],
  pastLen: number,
): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor('int64', ids, idsShape),
    attention_mask: new ort.Tensor('int64', mask, [idsShape[0], maskWidth]),
  }
  if (io.hasPositionIds) feeds.position_ids = new ort.Tensor('int64', positions, idsShape)
  if (io.hasUseCacheBranch) feeds.use_cache_branch = new ort.Tensor('bool', new Uint8Array([pastLen > 0 ? 1 : 0]), [1])
  if (io.hasNumLogitsToKeep) feeds.num_logits_to_keep = new ort.Tensor('int64', new BigInt64Array([1n]), [])
  past.forEach((layer, i) => {
    feeds[io.pastKey[i]] = layer.key
    feeds[io.pastValue[i]] = layer.value
  })
  return feeds
}
