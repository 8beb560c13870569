import { describe, expect, it } from 'vitest'
import { ApiError } from './api-error.ts'
import { effectivePriority, parsePriorityAsk } from './priority.ts'
import { parseSupersedeKey } from './supersede.ts'

describe('priority asks', () => {
  it('reads class names and whole numbers, and names the header for anything else', () => {
    expect(parsePriorityAsk(undefined)).toBeUndefined()
    expect(parsePriorityAsk('interactive')).toBe(0)
    expect(parsePriorityAsk('batch')).toBe(1000)
    expect(parsePriorityAsk('42')).toBe(42)
    for (const bad of ['', 'high', '-1', '1.5', '1000001', ' 3']) {
      expect(() => parsePriorityAsk(bad)).toThrow(ApiError)
      expect((() => { try { parsePriorityAsk(bad) } catch (e) { return (e as ApiError).param } })()).toBe('x-zl-priority')
    }
  })

  it("never runs a request ahead of its key's class", () => {
    expect(effectivePriority('interactive', undefined)).toBe(0)
    expect(effectivePriority('interactive', 1000)).toBe(1000)
    expect(effectivePriority('batch', 0)).toBe(1000)
    expect(effectivePriority('batch', 5000)).toBe(5000)
  })
})

describe('supersede keys', () => {
  it('takes 1–200 visible ASCII characters', () => {
    expect(parseSupersedeKey(undefined)).toBeUndefined()
    expect(parseSupersedeKey('doc:src/app.ts#1')).toBe('doc:src/app.ts#1')
    for (const bad of ['', 'a b', 'é', 'x'.repeat(201)]) expect(() => parseSupersedeKey(bad)).toThrow(/x-zl-supersede/)
  })
})
