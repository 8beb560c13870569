import { describe, expect, it } from 'vitest'
import { StopChecker } from './stop-checker.ts'

function feed(stops: string[], deltas: string[]) {
  const c = new StopChecker(stops)
  let out = ''
  for (const d of deltas) {
    const r = c.push(d)
    out += r.emit
    if (r.stopped) return { out, stopped: r.stopped }
  }
  return { out: out + c.flush(), stopped: undefined }
}

describe('StopChecker', () => {
  it('passes text through when there are no stop strings', () => {
    expect(feed([], ['ab', 'c'])).toEqual({ out: 'abc', stopped: undefined })
  })

  it('cuts before a stop string inside one delta', () => {
    expect(feed(['END'], ['abcENDxyz'])).toEqual({ out: 'abc', stopped: 'END' })
  })

  it('finds a stop string split across deltas and never emits its prefix', () => {
    const c = new StopChecker(['\n\nUser:'])
    expect(c.push('Hi\n').emit).toBe('Hi')
    expect(c.push('\nUs').emit).toBe('')
    expect(c.push('er: x')).toEqual({ emit: '', stopped: '\n\nUser:' })
  })

  it('releases held text once it can no longer start a stop string', () => {
    const c = new StopChecker(['abc'])
    expect(c.push('xab').emit).toBe('x')
    expect(c.push('d').emit).toBe('abd')
  })

  it('picks the earliest of several stop strings', () => {
    expect(feed(['zz', 'b'], ['azzb'])).toEqual({ out: 'a', stopped: 'zz' })
  })

  it('flushes held text when generation ends for another reason', () => {
    expect(feed(['stop'], ['hello st'])).toEqual({ out: 'hello st', stopped: undefined })
  })
})
