import * as ort from 'onnxruntime-node'
import { modelFeeds, presentsOf, type BatchCache, type KvJoin, type LayerKv, type PrefillCache } from './batch-kv-cache.ts'
import { kvBytesPerToken } from './runner.ts'
import type { SessionIo } from './session-io.ts'
import { blockTokens, readBlock, tokensIn, writeBlocks, type KvBlock } from './kv-block.ts'
import type { BufferContents, KvBufferSet } from './kv-buffer-set.ts'
import { kvArray, type KvArray } from './tensor-dtype.ts'

/**
 * Spare slots are added in steps of this many. A regrow copies the cache once; spare slots are
 * masked and cost only a little attention compute. 32 keeps both small at short contexts.
 */
export const SLOT_STEP = 32

/**
 * The capacity a cache grows to when `needed` slots no longer fit: an eighth more (so long
 * contexts regrow every ~T/8 steps, not every 32), rounded up to the slot step.
 */
export function grownCapacity(needed: number, slotStep = SLOT_STEP): number {
  return roundUp(needed + Math.floor(needed / 8), slotStep)
}

/** Rows are added in steps of this many (see reserve). */
const ROW_STEP = 8

/**
 * The KV cache of a "slots" model (session-io.ts): per layer, K and V buffers this class owns,
 * [rowCapacity, kvHeads, capacity, headDim] of the session's KV type. Row b holds its `lens[b]` tokens in slots
 * 0..lens[b]-1; the session gets the first `rows` rows as past (a view, no copy) with
 * attention_mask 1 on those slots, and returns only the step's new K/V, which are written into
 * the next free slots here. So a step never copies the whole cache — the concat interface makes
 * ONNX Runtime copy it into `present.*` and onnxruntime-node copy that again (FACTS.md), a cost
 * that grows with B·T. The whole cache is copied only when the buffers grow (rarely) or shrink.
 *
 * Serves both as the batch cache and, with one row, as a sequence's cache during chunked prefill.
 */
export class SlotKvCache implements BatchCache, PrefillCache {
  seqIds: number[] = []
  lens: number[] = []
  nextTokens: number[] = []
  /** Slots per row: the width every step attends over. */
  capacity = 0
  private rowCapacity = 0
  private keys: KvArray[] = []
  private values: KvArray[] = []
  /**
   * Per row, the blocks known to sit in its first tokens, in order from token 0 (BufferContents):
   * restored into it, saved from it, or held by the buffers it was given. A row writes only from
   * its token count on, and each write first forgets the known blocks that reach there (a new
   * row's held ones, which its first tokens overwrite); rows that move or leave take theirs along
   * (relayout).
   */
  private known: Array<readonly KvBlock[]> = []
  /**
   * The bytes these buffers may hold (ModelStep: the KV budget less the other caches). Spare rows
   * and slots are taken only inside it; see `sized`.
   */
  room: () => number = () => Infinity
  /** Where new buffers come from and an emptied batch's go (ModelStep's, shared by its caches); without it, new zeroed ones. */
  buffers?: KvBufferSet

  constructor(
    private readonly io: SessionIo,
    private readonly slotStep = SLOT_STEP,
    /** Rows are added in steps of this many: ROW_STEP for the batch, 1 for a sequence's own cache. */
    private readonly rowStep = ROW_STEP,
  ) {}

  /** Bytes the K and V buffers hold, spare rows and slots included. */
  get heldBytes(): number {
    return this.rowCapacity * this.capacity * kvBytesPerToken(this.io)
  }

  /**
   * An empty one-row cache for a sequence being prefilled in chunks. It never takes a second row:
   * spare rows there were the batch's step of eight, eight times the memory a prompt needs,
   * zero-filled again at every regrow.
   */
  static forSequence(io: SessionIo, seqId: number, slotStep = SLOT_STEP): SlotKvCache {
    const c = new SlotKvCache(io, slotStep, 1)
    c.seqIds = [seqId]
    c.lens = [0]
    c.nextTokens = [0]
    return c
  }

  get rows(): number {
    return this.seqIds.length
  }

  /** Reported as the KV width (kvTokens): the longest row, as the concat cache's padded width. */
  get width(): number {
    return maxOf(this.lens)
  }

  get len(): number {
    return this.lens[0] ?? 0
  }

  decodeFeeds(): Record<string, ort.Tensor> {
    return this.feeds(BigInt64Array.from(this.nextTokens, (t) => BigInt(t)), 1)
  }

  acceptDecode(outputs: ort.InferenceSession.ReturnType): void {
    this.accept(outputs, 1)
  }

  /**
   * Feeds for `s` new tokens per row (ids [rows, s]) at positions lens[b]..lens[b]+s-1 (a row of
   * `counts[b]` real tokens: its positions stop at its last). Makes room first, so the new K/V can
   * be written after the step.
   */
  feeds(ids: BigInt64Array, s: number, counts?: readonly number[]): Record<string, ort.Tensor> {
    const b = this.rows
    this.reserve(b, maxOf(this.lens) + s)
    // Rows that all start empty (a prompt's first chunk) are fed no past: the capacity's masked
    // zeros would cost a chunk's attention and the graph's concat of them, for nothing. The new
    // K/V are written into the buffers after the step all the same (accept).
    const cap = this.lens.every((l) => l === 0) ? 0 : this.capacity
    const total = cap + s
    const mask = new BigInt64Array(b * total)
    const positions = new BigInt64Array(b * s)
    for (let r = 0; r < b; r++) {
      mask.fill(1n, r * total, r * total + this.lens[r])
      mask.fill(1n, r * total + cap, (r + 1) * total)
      // A ragged row's padding (feedsRagged) repeats its last token at its last position: a
      // position past the row's own end could be past the model's context (learned positions).
      const last = (counts?.[r] ?? s) - 1
      for (let i = 0; i < s; i++) positions[r * s + i] = BigInt(this.lens[r] + Math.min(i, last))
    }
    return modelFeeds(this.io, ids, [b, s], mask, total, positions, this.layers(cap), cap)
  }

  /** Writes the step's new K/V ([rows, kvHeads, s, headDim]) after each row's tokens. */
  accept(outputs: ort.InferenceSession.ReturnType, s: number): void {
    this.acceptRagged(outputs, this.lens.map(() => s))
  }

  readBlock(seqId: number, from: number, count: number, into?: KvBlock): KvBlock {
    const r = this.rowOf(seqId)
    const block = readBlock(this.io, this.keys, this.values, this.rowLayout(r), from, count, into)
    // Known blocks run from token 0 without a gap: a block saved right after them extends them.
    const known = this.known[r] ?? []
    if (from === tokensIn(this.io, known)) this.known[r] = [...known, block]
    return block
  }

  /** Row `from` becomes `seqId`'s, cut to its first `keep` tokens (runner.ts Takeover). */
  takeOver(from: number, seqId: number, keep: number): void {
    const r = this.rowOf(from)
    if (keep > this.lens[r]!) throw new Error(`row ${from} holds ${this.lens[r]} tokens, not ${keep}`)
    this.seqIds[r] = seqId
    this.lens[r] = keep
    this.known[r] = within(this.io, this.known[r] ?? [], keep)
  }

  readRow(seqId: number, count: number): KvBlock {
    return readBlock(this.io, this.keys, this.values, this.rowLayout(this.rowOf(seqId)), 0, count)
  }

  private rowOf(seqId: number): number {
    const r = this.seqIds.indexOf(seqId)
    if (r < 0) throw new Error(`no batch row for sequence ${seqId}`)
    return r
  }

  /**
   * Room for `slots` tokens in a one-row cache, taken at once: a prompt's length is known when its
   * prefill starts, and growing chunk by chunk copied the row and zero-filled fresh buffers at
   * nearly every chunk (an eighth more each time).
   */
  expect(slots: number): void {
    this.reserve(1, slots)
  }

  /**
   * Rows for several sequences at once, each starting from its own cached blocks (`blocks[r]`),
   * with room for `slots` tokens in every row: prompts that continue cached prefixes, prefilled
   * together (feedsRagged) rather than one run each.
   */
  startRows(seqIds: readonly number[], blocks: ReadonlyArray<readonly KvBlock[]>, slots: number): void {
    this.seqIds = [...seqIds]
    this.lens = seqIds.map(() => 0)
    this.nextTokens = seqIds.map(() => 0)
    this.reserve(seqIds.length, slots, 0)
    this.known.length = seqIds.length
    blocks.forEach((b, r) => this.restoreRow(r, b))
  }

  /**
   * New rows after the others, each restored from its own cached blocks (Restore), with room for
   * the next step's `width` tokens a row: it feeds them the rest of their prompts. Their buffers'
   * rows held nothing known unless kept buffers are taken for them.
   */
  addRows(seqIds: readonly number[], blocks: ReadonlyArray<readonly KvBlock[]>, width: number): void {
    const first = this.rows
    this.seqIds = [...this.seqIds, ...seqIds]
    this.lens = [...this.lens, ...seqIds.map(() => 0)]
    this.nextTokens = [...this.nextTokens, ...seqIds.map(() => 0)]
    this.known = [...this.known.slice(0, first), ...seqIds.map(() => [])]
    // An emptied batch takes back the rows it let go, when they are enough: its rows' K/V may be
    // in place (a warm turn's one row, a wave of keystrokes), and fresh spare rows cost pages.
    const kept = first === 0 ? this.buffers?.keptRows : undefined
    this.reserve(this.rows, Math.max(maxOf(this.lens), ...blocks.map((b) => tokensIn(this.io, b))) + width, first, kept !== undefined && kept >= this.rows ? kept : undefined)
    blocks.forEach((b, i) => this.restoreRow(first + i, b))
  }

  /** Row `r` (empty) from `blocks`; blocks already in place (the buffers were this row's last turn's) are not written again. */
  private restoreRow(r: number, blocks: readonly KvBlock[]): void {
    const have = this.known[r] ?? []
    let same = 0
    while (same < blocks.length && have[same] === blocks[same]) same++
    writeBlocks(this.io, blocks, this.keys, this.values, this.rowLayout(r), same)
    this.lens[r] = tokensIn(this.io, blocks)
    this.known[r] = [...blocks]
  }

  /**
   * Feeds for each row's own new tokens, `tokens[r]` (lengths may differ): ids [rows, s] with s the
   * longest, a shorter row padded at its end by repeating its last token. A row's real tokens come
   * first and attend only to themselves and before (the causal mask), so its padding changes none
   * of their logits or K/V; acceptRagged keeps only the real ones. Logits are kept from the
   * earliest position any row reads, `firstRead[r]` (a prompt's last token; a draft's first), to
   * the end (num_logits_to_keep; 0 keeps them all): a prompt's other positions would only run the
   * LM head for nothing.
   */
  feedsRagged(tokens: ReadonlyArray<readonly number[]>, firstRead: readonly number[]): Record<string, ort.Tensor> {
    const s = tokens.reduce((m, t) => Math.max(m, t.length), 0)
    const ids = new BigInt64Array(this.rows * s)
    tokens.forEach((t, r) => {
      for (let i = 0; i < s; i++) ids[r * s + i] = BigInt(t[Math.min(i, t.length - 1)]!)
    })
    const feeds = this.feeds(ids, s, tokens.map((t) => t.length))
    const keep = s - Math.min(...firstRead)
    if (feeds.num_logits_to_keep) feeds.num_logits_to_keep = new ort.Tensor('int64', BigInt64Array.of(BigInt(keep >= s ? 0 : keep)), [])
    return feeds
  }

  /** Writes each row's first `counts[r]` new K/V of a step ([rows, kvHeads, s, headDim], s its width) after its tokens. */
  acceptRagged(outputs: ort.InferenceSession.ReturnType, counts: readonly number[]): void {
    const { numKvHeads: h, headDim: d } = this.io
    const cap = this.capacity
    this.known = this.known.map((blocks, r) => within(this.io, blocks, this.lens[r] ?? 0))
    presentsOf(this.io, outputs).forEach((layer, i) => {
      for (const [src, dst] of [[layer.key, this.keys[i]], [layer.value, this.values[i]]] as const) {
        const data = src.data as KvArray
        const s = src.dims[2]!
        for (let r = 0; r < this.rows; r++) {
          for (let head = 0; head < h; head++) {
            const from = (r * h + head) * s * d
            dst.set(data.subarray(from, from + counts[r]! * d), ((r * h + head) * cap + this.lens[r]!) * d)
          }
        }
      }
    })
    counts.forEach((n, r) => (this.lens[r] += n))
  }

  /** Row `r` of this cache as a sequence joining the batch. */
  joinRow(r: number, nextToken: number): KvJoin {
    return { seqId: this.seqIds[r]!, nextToken, len: this.lens[r]!, layers: this.layers(), row: r, start: 0, blocks: this.known[r] ?? [] }
  }

  /** One row of this cache, empty so far: its first tokens from cached blocks. */
  startFrom(blocks: readonly KvBlock[]): void {
    this.startRows(this.seqIds, [blocks], tokensIn(this.io, blocks) + 1)
  }

  private rowLayout(r: number): (head: number, t: number) => number {
    const { numKvHeads: h, headDim: d } = this.io
    const cap = this.capacity
    return (head, t) => ((r * h + head) * cap + t) * d
  }

  /** This one-row cache as a sequence joining the batch (its tokens start at slot 0). */
  join(seqId: number, nextToken: number): KvJoin {
    return { seqId, nextToken, len: this.len, layers: this.layers(), row: 0, start: 0, blocks: this.known[0] ?? [] }
  }

  /**
   * Drops rows (the kept ones move up, in place: memory that is already warm) and appends
   * joining sequences after them, in the same order as the concat cache.
   */
  relayout(remove: ReadonlySet<number>, joins: readonly KvJoin[] = []): void {
    const keep: number[] = []
    for (let r = 0; r < this.rows; r++) if (!remove.has(this.seqIds[r])) keep.push(r)
    if (keep.length === this.rows && joins.length === 0) return
    if (keep.length === 0 && this.adopt(joins)) return
    keep.forEach((from, to) => {
      if (from !== to) this.eachBuffer((buf) => this.moveRow(buf, from, to))
    })
    this.seqIds = [...keep.map((r) => this.seqIds[r]), ...joins.map((j) => j.seqId)]
    this.nextTokens = [...keep.map((r) => this.nextTokens[r]), ...joins.map((j) => j.nextToken)]
    this.lens = [...keep.map((r) => this.lens[r]), ...joins.map((j) => j.len)]
    // Nothing moved when every row left: the buffers hold what the rows knew, where they were.
    if (this.rows === 0) return this.free()
    this.known = [...keep.map((r) => this.known[r] ?? []), ...joins.map((j) => j.blocks ?? [])]
    const longest = maxOf(this.lens) + 1
    // The buffers may hold more than the room now left (spare taken before a prefill cache grew,
    // or the rows whose need alone broke the budget have left): refit then, joins or not.
    const overRoom = this.heldBytes > this.room()
    if (joins.length === 0 && !overRoom) return
    // Joins are the moment a copy is due anyway: shrink when long sequences have left.
    if (overRoom || this.capacity >= 2 * roundUp(longest, this.slotStep)) {
      const [rowCapacity, capacity] = this.sized(this.rows, longest, Math.max(this.rows, this.rowCapacity), roundUp(longest, this.slotStep))
      if (rowCapacity !== this.rowCapacity || capacity !== this.capacity) this.resize(rowCapacity, capacity, keep.length)
    } else this.reserve(this.rows, longest, keep.length)
    const { numKvHeads: h, headDim: d } = this.io
    joins.forEach((j, n) => {
      const to = keep.length + n
      j.layers.forEach((layer, i) => {
        for (const [src, dst] of [[layer.key, this.keys[i]], [layer.value, this.values[i]]] as const) {
          const width = src.dims[2]
          const first = j.start ?? width - j.len
          const data = src.data as KvArray
          for (let head = 0; head < h; head++) {
            const from = ((j.row * h + head) * width + first) * d
            dst.set(data.subarray(from, from + j.len * d), (to * h + head) * this.capacity * d)
          }
        }
      })
    })
  }

  /**
   * An empty batch takes a lone joining sequence's one-row buffers as they are (a sequence's
   * prefill cache, done with them) instead of allocating and zero-filling a row step of rows to
   * copy one into: on an idle node, every request's first step paid for that. A second sequence
   * joining later grows the rows, copying this one. Not past the room (the budget less the other
   * caches): the copy then sizes the row to fit.
   */
  private adopt(joins: readonly KvJoin[]): boolean {
    const j = joins.length === 1 ? joins[0]! : undefined
    const first = j?.layers[0]?.key
    if (!j || !first || j.row !== 0 || j.start !== 0) return false
    const [rows, , width] = first.dims as number[]
    // The sequence cache's own buffers: views from their start (a buffer from `buffers` may be longer).
    const own = (t: ort.Tensor) => (t.data as KvArray).byteOffset === 0
    if (rows !== 1 || width! < j.len + 1 || width! * kvBytesPerToken(this.io) > this.room()) return false
    if (!j.layers.every((l) => own(l.key) && own(l.value))) return false
    this.keys = j.layers.map((l) => l.key.data as KvArray)
    this.values = j.layers.map((l) => l.value.data as KvArray)
    this.rowCapacity = 1
    this.capacity = width!
    this.known = [j.blocks ?? []]
    this.seqIds = [j.seqId]
    this.nextTokens = [j.nextToken]
    this.lens = [j.len]
    return true
  }

  /** The first `rows` rows of each buffer, as the session's past (views, no copy); `width` 0: an empty past. */
  private layers(width = this.capacity): LayerKv[] {
    const { numKvHeads: h, headDim: d } = this.io
    const shape = [this.rows, h, width, d]
    const size = this.rows * h * width * d
    return this.keys.map((k, i) => ({
      key: new ort.Tensor(this.io.kvType, k.subarray(0, size), shape),
      value: new ort.Tensor(this.io.kvType, this.values[i].subarray(0, size), shape),
    }))
  }

  /**
   * Makes `rows` rows of `slots` slots fit (a no-op when they do); the first `valid` rows hold
   * data. A row with no tokens yet knows what the new buffers held in its place.
   */
  private reserve(rows: number, slots: number, valid = this.rows, rowsWanted?: number): void {
    if (rows <= this.rowCapacity && slots <= this.capacity) return
    // Rows grow to the next multiple of ROW_STEP (joins come a few at a time); slots grow by grownCapacity.
    const wantRows = rows <= this.rowCapacity ? this.rowCapacity : (rowsWanted ?? roundUp(rows, this.rowStep))
    const kept = this.buffers?.slotsFor(wantRows, this.io.numKvHeads * this.io.headDim) ?? 0
    let grown = slots <= this.capacity ? this.capacity : grownCapacity(slots, this.slotStep)
    // Kept buffers that hold the slots are taken whole, their capacity as it is (within twice the
    // growth). Kept ones a little too small are a conversation that outgrew its last turn's: the
    // new ones get room for a few more turns (an eighth more again), or every other turn would
    // miss them.
    if (kept > 0 && kept < slots) grown = grownCapacity(grown, this.slotStep)
    const wantSlots = kept >= slots && kept <= 2 * grown ? kept : grown
    const held = this.resize(...this.sized(rows, slots, wantRows, wantSlots), valid)
    this.known = this.seqIds.map((_, r) => ((this.lens[r] ?? 0) > 0 ? (this.known[r] ?? []) : (held[r] ?? [])))
  }

  /**
   * Buffer sizes for `rows` rows of at least `slots` slots, with up to `wantRows` × `wantSlots`
   * of spare. Spare saves copies, but a step attends over every slot and the buffers are memory:
   * the scheduler keeps the live tokens within the KV budget, and the spare must not be what
   * breaks it. So the buffers hold at most `room()` bytes, or the live need with its slots rounded
   * to the slot step when that alone is more (one sequence alone over the budget, which the
   * scheduler allows; a prefill chunk). Spare slots are kept before spare rows: they are the
   * ones a growing batch needs every few steps.
   */
  private sized(rows: number, slots: number, wantRows: number, wantSlots: number): [rowCapacity: number, capacity: number] {
    const maxSlots = Math.floor(Math.max(0, this.room()) / kvBytesPerToken(this.io))
    if (wantRows * wantSlots <= maxSlots) return [wantRows, wantSlots]
    const capacity = Math.max(roundUp(slots, this.slotStep), Math.min(wantSlots, Math.floor(maxSlots / rows / this.slotStep) * this.slotStep))
    return [Math.max(rows, Math.min(wantRows, Math.floor(maxSlots / capacity))), capacity]
  }

  /**
   * New buffers of the given size, with the tokens of the first `valid` rows copied over; returns
   * the blocks the new buffers' rows already held (kept buffers taken whole: KvBufferSet.takeSet),
   * which matters where no row is copied in.
   */
  private resize(rowCapacity: number, capacity: number, valid: number): BufferContents['rows'] {
    const { numLayers, numKvHeads: h, headDim: d } = this.io
    const n = rowCapacity * h * capacity * d
    const taken = this.buffers ? this.buffers.takeSet(2 * numLayers, n, { rowCapacity, capacity }) : { arrays: Array.from({ length: 2 * numLayers }, () => kvArray(this.io.kvType, n)) }
    const copy = (old: KvArray | undefined, next: KvArray): KvArray => {
      if (old) {
        for (let r = 0; r < valid; r++) {
          for (let head = 0; head < h; head++) {
            const from = (r * h + head) * this.capacity * d
            next.set(old.subarray(from, from + this.lens[r] * d), (r * h + head) * capacity * d)
          }
        }
      }
      return next
    }
    this.keys = Array.from({ length: numLayers }, (_, i) => copy(this.keys[i], taken.arrays[i]!))
    this.values = Array.from({ length: numLayers }, (_, i) => copy(this.values[i], taken.arrays[numLayers + i]!))
    this.rowCapacity = rowCapacity
    this.capacity = capacity
    return taken.rows ?? []
  }

  /** Row `from`'s tokens to row `to` (< from), head by head, inside the same buffer. */
  private moveRow(buf: KvArray, from: number, to: number): void {
    const { numKvHeads: h, headDim: d } = this.io
    const len = this.lens[from] * d
    for (let head = 0; head < h; head++) {
      const src = (from * h + head) * this.capacity * d
      buf.copyWithin((to * h + head) * this.capacity * d, src, src + len)
    }
  }

  private eachBuffer(fn: (buf: KvArray) => void): void {
    this.keys.forEach(fn)
    this.values.forEach(fn)
  }

  /** An empty batch holds no memory of its own (its buffers go to `buffers`, for the next cache). */
  private free(): void {
    this.buffers?.keep([...this.keys, ...this.values], { rowCapacity: this.rowCapacity, capacity: this.capacity, rows: this.known })
    this.known = []
    this.keys = []
    this.values = []
    this.rowCapacity = 0
    this.capacity = 0
  }
}

const maxOf = (xs: readonly number[]): number => xs.reduce((m, x) => Math.max(m, x), 0)
const roundUp = (n: number, step: number): number => Math.ceil(n / step) * step

/** The first of `blocks` (in order from token 0) that end by token `end`. */
function within(io: SessionIo, blocks: readonly KvBlock[], end: number): readonly KvBlock[] {
  let at = 0
  let n = 0
  while (n < blocks.length && (at += blockTokens(io, blocks[n]!)) <= end) n++
  return n === blocks.length ? blocks : blocks.slice(0, n)
}
