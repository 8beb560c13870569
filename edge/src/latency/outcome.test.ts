import { describe, expect, it } from 'vitest'
import { CLIENT_CLOSED_STATUS, isError, toOutcome } from './outcome.ts'

describe('toOutcome', () => {
  it('labels edge answers by status', () => {
    const cases: Array<[number, string]> = [
      [200, 'ok'],
      [400, 'bad_request'],
      [404, 'bad_request'],
      [413, 'bad_request'],
      [401, 'auth_failed'],
      [403, 'auth_failed'],
      [429, 'rate_limited'],
      [502, 'upstream_unavailable'],
      [503, 'overloaded'],
      [529, 'overloaded'],
      [504, 'timeout'],
      [500, 'internal'],
      [CLIENT_CLOSED_STATUS, 'client_aborted'],
    ]
    for (const [status, outcome] of cases) expect(toOutcome(status, 'complete', false), String(status)).toBe(outcome)
  })

  it('lets the body ending decide once a node answered', () => {
    expect(toOutcome(200, 'client_gone', true)).toBe('client_aborted')
    expect(toOutcome(200, 'upstream_error', true)).toBe('upstream_error')
    expect(toOutcome(500, 'complete', true)).toBe('upstream_error')
    expect(toOutcome(400, 'complete', true)).toBe('bad_request')
  })

  it('counts only failures of the service as errors', () => {
    expect(['overloaded', 'upstream_unavailable', 'upstream_error', 'timeout', 'internal'].every((o) => isError(o as never))).toBe(true)
    expect(['ok', 'client_aborted', 'bad_request', 'auth_failed', 'rate_limited'].some((o) => isError(o as never))).toBe(false)
  })
})
