import { describe, expect, it } from 'vitest'
import { singleFlight } from './single-flight.ts'

function deferred<T>() {
  let resolve!: (v: T) => void
  let reject!: (e: Error) => void
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)))
  return { promise, resolve, reject }
}

describe('singleFlight', () => {
  it('shares one call among concurrent callers of a key, and calls again once it settled', async () => {
    const calls: string[] = []
    const pending = new Map<string, ReturnType<typeof deferred<number>>>()
    const get = singleFlight((key) => {
      calls.push(key)
      const d = deferred<number>()
      pending.set(key, d)
      return d.promise
    })
    const a = [get('a'), get('a'), get('a')]
    const b = get('b')
    expect(calls).toEqual(['a', 'b'])
    pending.get('a')!.resolve(1)
    pending.get('b')!.resolve(2)
    expect(await Promise.all(a)).toEqual([1, 1, 1])
    expect(await b).toBe(2)
    const again = get('a')
    expect(calls).toEqual(['a', 'b', 'a'])
    pending.get('a')!.resolve(3)
    expect(await again).toBe(3)
  })

  it('gives every waiter the failure, and does not keep it', async () => {
    let n = 0
    const d = deferred<string>()
    const get = singleFlight(async () => (n++ === 0 ? d.promise : 'ok'))
    const both = Promise.allSettled([get('k'), get('k')])
    d.reject(new Error('down'))
    expect((await both).map((r) => r.status)).toEqual(['rejected', 'rejected'])
    expect(await get('k')).toBe('ok')
    expect(n).toBe(2)
  })
})
