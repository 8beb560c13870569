import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { createBufferedLog, FLUSH_MS, MAX_BUFFERED_CHARS } from './buffered-log.ts'

describe('buffered log', () => {
  beforeEach(() => vi.useFakeTimers())
  afterEach(() => vi.useRealTimers())

  it('writes the lines of FLUSH_MS in one write, in order, as JSON lines', () => {
    const writes: string[] = []
    const { log } = createBufferedLog((t) => writes.push(t))
    log({ n: 1 })
    vi.advanceTimersByTime(FLUSH_MS - 1)
    log({ n: 2, s: 'a"b' })
    expect(writes).toEqual([])
    vi.advanceTimersByTime(1)
    expect(writes).toEqual(['{"n":1}\n{"n":2,"s":"a\\"b"}\n'])
    log({ n: 3 })
    vi.advanceTimersByTime(FLUSH_MS)
    expect(writes).toEqual(['{"n":1}\n{"n":2,"s":"a\\"b"}\n', '{"n":3}\n'])
    expect(writes.join('').trim().split('\n').map((l) => JSON.parse(l).n)).toEqual([1, 2, 3])
  })

  it('writes at once, without the timer, once MAX_BUFFERED_CHARS wait', () => {
    const writes: string[] = []
    const { log } = createBufferedLog((t) => writes.push(t))
    const big = 'x'.repeat(MAX_BUFFERED_CHARS / 4)
    for (let i = 0; i < 3; i++) log({ big })
    expect(writes).toEqual([])
    log({ big })
    expect(writes).toHaveLength(1)
    expect(writes[0]!.trim().split('\n')).toHaveLength(4)
    vi.advanceTimersByTime(FLUSH_MS)
    expect(writes).toHaveLength(1)
  })

  it('flush() writes what is buffered at once, and the timer then writes nothing', () => {
    const writes: string[] = []
    const b = createBufferedLog((t) => writes.push(t))
    b.log({ n: 1 })
    b.flush()
    expect(writes).toEqual(['{"n":1}\n'])
    vi.advanceTimersByTime(FLUSH_MS)
    expect(writes).toHaveLength(1)
  })
})
