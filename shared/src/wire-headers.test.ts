import { describe, expect, it } from 'vitest'
import { parseWireHeaders, WIRE_HEADERS } from './wire-headers.ts'

describe('parseWireHeaders', () => {
  it('reads typed values from a Headers object', () => {
    const h = new Headers({
      [WIRE_HEADERS.requestId]: 'req-1',
      [WIRE_HEADERS.traceparent]: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      [WIRE_HEADERS.tenant]: 'acme',
      [WIRE_HEADERS.keyId]: 'k1',
      [WIRE_HEADERS.deadlineMs]: '1700000000000',
      [WIRE_HEADERS.priority]: '-2',
      [WIRE_HEADERS.edge]: 'FRA',
      [WIRE_HEADERS.signature]: 't=1,v1=ab',
    })
    expect(parseWireHeaders((n) => h.get(n))).toEqual({
      requestId: 'req-1',
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tenant: 'acme',
      keyId: 'k1',
      deadlineMs: 1_700_000_000_000,
      priority: -2,
      edge: 'FRA',
      signature: 't=1,v1=ab',
    })
  })

  it('defaults priority to 0 and leaves absent or malformed values out', () => {
    expect(parseWireHeaders(() => null)).toEqual({ priority: 0 })
    const bad: Record<string, string> = { [WIRE_HEADERS.priority]: 'high', [WIRE_HEADERS.deadlineMs]: 'soon', [WIRE_HEADERS.tenant]: '  ' }
    expect(parseWireHeaders((n) => bad[n])).toEqual({ priority: 0 })
  })
})
