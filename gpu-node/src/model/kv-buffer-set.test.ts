import { describe, expect, it } from 'vitest'
import { KvBufferSet } from './kv-buffer-set.ts'

describe('KvBufferSet', () => {
  it('hands out the smallest kept buffer that holds a request, whole or as a view from its start', () => {
    const set = new KvBufferSet('float32')
    const small = new Float32Array(100)
    const large = new Float32Array(400)
    set.keep([large, small])
    expect(set.slotsFor(1, 10)).toBe(10)
    // Far smaller than anything kept: a new buffer, the kept ones stay.
    expect(set.take(20).buffer).not.toBe(small.buffer)
    const a = set.take(80)
    expect(a.buffer).toBe(small.buffer)
    expect(a.length).toBe(80)
    const b = set.take(400)
    expect(b).toBe(large)
    expect(set.slotsFor(1, 10)).toBe(0)
  })

  it('gives new zeroed buffers, and drops what it kept, when nothing kept holds the request', () => {
    const set = new KvBufferSet('float16')
    set.keep([new Uint16Array(10).fill(7)])
    const fresh = set.take(20)
    expect(fresh).toBeInstanceOf(Uint16Array)
    expect(Array.from(fresh)).toEqual(new Array(20).fill(0))
    expect(set.slotsFor(1, 1)).toBe(0)
  })

  it('keeps a view as the whole buffer it views, and one set: a smaller one never displaces it', () => {
    const set = new KvBufferSet('float32')
    const buffer = new Float32Array(64)
    set.keep([buffer.subarray(0, 16)])
    expect(set.slotsFor(1, 1)).toBe(64)
    set.keep([new Float32Array(8)])
    expect(set.slotsFor(1, 1)).toBe(64)
    expect(set.take(64).buffer).toBe(buffer.buffer)
    set.keep([new Float32Array(8)])
    expect(set.slotsFor(1, 1)).toBe(8)
  })

  it('says what a kept set holds only to a taker of the whole set, in its order and layout, once', () => {
    const block = { keys: [], values: [] }
    const layout = { rowCapacity: 1, capacity: 10 }
    const kept = () => {
      const set = new KvBufferSet('float32')
      const arrays = [new Float32Array(40), new Float32Array(40)]
      set.keep(arrays, { ...layout, rows: [[block]] })
      return { set, arrays }
    }
    const { set, arrays } = kept()
    const whole = set.takeSet(2, 40, layout)
    expect(whole.arrays).toEqual(arrays)
    expect(whole.arrays[0]).toBe(arrays[0])
    expect(whole.rows).toEqual([[block]])
    // Taken once: kept again without a record, nothing is known.
    set.keep(arrays)
    expect(set.takeSet(2, 40, layout).rows).toBeUndefined()
    // Another layout of the same elements (two rows of 5 slots), a part of the set, or a view: unknown.
    expect(kept().set.takeSet(2, 40, { rowCapacity: 2, capacity: 5 }).rows).toBeUndefined()
    expect(kept().set.takeSet(1, 40, layout).rows).toBeUndefined()
    const partial = kept()
    partial.set.take(40)
    expect(partial.set.takeSet(1, 40, layout).rows).toBeUndefined()
    const views = new KvBufferSet('float32')
    views.keep([new Float32Array(80).subarray(0, 40)], { ...layout, rows: [[block]] })
    expect(views.takeSet(1, 80, layout).rows).toBeUndefined()
    // A request far smaller leaves the record for the next turn.
    const between = kept()
    expect(between.set.takeSet(2, 4, { rowCapacity: 1, capacity: 1 }).rows).toBeUndefined()
    expect(between.set.takeSet(2, 40, layout).rows).toEqual([[block]])
  })
})
