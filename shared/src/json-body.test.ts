import { describe, expect, it } from 'vitest'
import { ApiError } from './api-error.ts'
import { parseJsonBody } from './json-body.ts'

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn()
  } catch (e) {
    return e instanceof ApiError ? e.code : 'not an ApiError'
  }
  return undefined
}

describe('parseJsonBody', () => {
  it('parses JSON from bytes or text', () => {
    expect(parseJsonBody(new TextEncoder().encode('{"a":1}'))).toEqual({ a: 1 })
    expect(parseJsonBody('[1]')).toEqual([1])
  })

  it('rejects broken, empty and non-UTF-8 bodies as invalid_json', () => {
    expect(codeOf(() => parseJsonBody('{"a":'))).toBe('invalid_json')
    expect(codeOf(() => parseJsonBody('  '))).toBe('invalid_json')
    expect(codeOf(() => parseJsonBody(new Uint8Array([0x7b, 0xff, 0x7d])))).toBe('invalid_json')
  })
})
