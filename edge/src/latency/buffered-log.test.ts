import { describe, expect, it } from 'vitest'
import { createBufferedLog } from './buffered-log.ts'

describe('buffered log', () => {
  it('writes the lines of one turn in one write, in order, as JSON lines', async () => {
    const writes: string[] = []
    const { log } = createBufferedLog((t) => writes.push(t))
    log({ n: 1 })
    log({ n: 2, s: 'a"b' })
    expect(writes).toEqual([])
    await new Promise((r) => setImmediate(r))
    expect(writes).toEqual(['{"n":1}\n{"n":2,"s":"a\\"b"}\n'])
    log({ n: 3 })
    await new Promise((r) => setImmediate(r))
    expect(writes).toEqual(['{"n":1}\n{"n":2,"s":"a\\"b"}\n', '{"n":3}\n'])
    expect(writes.join('').trim().split('\n').map((l) => JSON.parse(l).n)).toEqual([1, 2, 3])
  })

  it('flush() writes what is buffered at once, and the scheduled turn then writes nothing', async () => {
    const writes: string[] = []
    const b = createBufferedLog((t) => writes.push(t))
    b.log({ n: 1 })
    b.flush()
    expect(writes).toEqual(['{"n":1}\n'])
    await new Promise((r) => setImmediate(r))
    expect(writes).toHaveLength(1)
  })
})
