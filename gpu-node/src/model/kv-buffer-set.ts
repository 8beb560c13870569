import type { KvBlock } from './kv-block.ts'
import { kvArray, type KvArray, type KvType } from './tensor-dtype.ts'

/**
 * Which blocks a cache's buffers hold, row by row: `rows[r]` are blocks whose K/V sit in row r's
 * first tokens, one after another from token 0, in buffers of this layout ([rowCapacity, kvHeads,
 * capacity, headDim]). A block is a new object at every save (kv-block.ts readBlock), so the
 * same object means the same K/V.
 */
export interface BufferContents {
  rowCapacity: number
  capacity: number
  rows: ReadonlyArray<readonly KvBlock[]>
}

/**
 * KV buffers an emptied batch let go, kept for the next cache that needs buffers, so it writes
 * into memory the process already touched. A fresh buffer of tens of MB comes from pages the
 * kernel maps on first write (glibc's calloc skips zeroing a fresh heap top), so a warm chat turn
 * restoring its cached tokens into one pays for mapping every page. One set is kept, the largest
 * recently let go: an idle node holds no more than a batch of its held.
 *
 * A taken buffer's contents are stale. That is safe where the slot cache puts it: slots beyond a
 * row's tokens are masked, and a departed row's finite K/V there is what a batch row already sees
 * (slot-kv-edit-exact.test.ts's unmasked-slot control shows a mask error would change texts).
 */
export class KvBufferSet {
  private free: KvArray[] = []
  /** What the kept buffers hold, in the order they were kept; dropped when any of them is taken. */
  private contents?: BufferContents & { arrays: readonly KvArray[] }

  constructor(private readonly type: KvType) {}

  /**
   * `length` elements: the smallest kept buffer that holds them without being more than twice as
   * large (a view of it), else a new one. A short request never takes a long conversation's
   * buffers; kept buffers all too small are dropped (they would only be memory beside the new).
   */
  take(length: number): KvArray {
    let best = -1
    this.free.forEach((a, i) => {
      if (a.length >= length && a.length <= 2 * length && (best < 0 || a.length < this.free[best]!.length)) best = i
    })
    if (best < 0) {
      if (this.free.every((a) => a.length < length)) {
        this.free = []
        this.contents = undefined
      }
      return kvArray(this.type, length)
    }
    const [a] = this.free.splice(best, 1)
    this.contents = undefined
    return a!.length === length ? a! : a!.subarray(0, length)
  }

  /**
   * `count` buffers of `length` elements (take), and what they hold when they are the kept set
   * whole, in the order it was kept, for the same layout: a conversation's next turn finds its
   * last turn's K/V still in place (the emptied batch let go of them untouched) and need not
   * write them again.
   */
  takeSet(count: number, length: number, layout: { rowCapacity: number; capacity: number }): { arrays: KvArray[]; rows?: BufferContents['rows'] } {
    const c = this.contents
    const arrays = Array.from({ length: count }, () => this.take(length))
    const same = c && c.rowCapacity === layout.rowCapacity && c.capacity === layout.capacity && c.arrays.length === count && arrays.every((a, i) => a === c.arrays[i])
    return same ? { arrays, rows: c.rows } : { arrays }
  }

  /** The rows the kept buffers were let go with, when what they hold is known (takeSet). */
  get keptRows(): number | undefined {
    return this.contents?.rowCapacity
  }

  /**
   * How many slots of `perSlot` elements each kept buffer holds for `rows` rows (the fewest of
   * them); 0 when none is kept. A cache that needs no more takes that capacity and so the
   * buffers whole: capacities grow by an eighth, and a conversation's next turn needs a little
   * more than its last one had, but less than its last one held.
   */
  slotsFor(rows: number, perSlot: number): number {
    if (this.free.length === 0) return 0
    return Math.floor(Math.min(...this.free.map((a) => a.length)) / (rows * perSlot))
  }

  /**
   * Keeps `arrays` (whole buffers; views are kept as the buffers they view) in place of those kept
   * before, unless those are larger: a short request between a conversation's turns must not
   * leave the next turn only its small buffers.
   */
  keep(arrays: readonly KvArray[], contents?: BufferContents): void {
    const isWhole = (a: KvArray) => a.byteOffset === 0 && a.byteLength === a.buffer.byteLength
    const next = arrays.map((a) => (isWhole(a) ? a : whole(a)))
    if (bytesOf(next) < bytesOf(this.free)) return
    this.free = next
    // A view's layout is not its whole buffer's: what it held is not known there.
    this.contents = contents && arrays.every(isWhole) ? { ...contents, arrays: [...next] } : undefined
  }
}

function whole(a: KvArray): KvArray {
  return a instanceof Float32Array ? new Float32Array(a.buffer) : new Uint16Array(a.buffer)
}

const bytesOf = (arrays: readonly KvArray[]): number => arrays.reduce((n, a) => n + a.byteLength, 0)
