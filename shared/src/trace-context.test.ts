import { describe, expect, it } from 'vitest'
import { childSpan, continueTrace, formatTraceparent, parseTraceparent, startTrace } from './trace-context.ts'

const header = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'

describe('traceparent', () => {
  it('parses and formats the W3C example', () => {
    const ctx = parseTraceparent(header)
    expect(ctx).toEqual({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', flags: 1 })
    expect(formatTraceparent(ctx!)).toBe(header)
  })

  it('rejects invalid headers', () => {
    for (const bad of [
      '',
      'garbage',
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01',
      `${header}-extra`,
    ]) expect(parseTraceparent(bad)).toBeUndefined()
  })

  it('accepts future versions with extra fields', () => {
    expect(parseTraceparent('01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future')?.spanId).toBe('00f067aa0ba902b7')
  })

  it('continues a trace with a new span, or starts one', () => {
    const continued = continueTrace(header)
    expect(continued.ctx.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736')
    expect(continued.ctx.spanId).toMatch(/^[0-9a-f]{16}$/)
    expect(continued.ctx.spanId).not.toBe('00f067aa0ba902b7')
    expect(continued.parentSpanId).toBe('00f067aa0ba902b7')
    const started = continueTrace('nonsense')
    expect(started.parentSpanId).toBeUndefined()
    expect(parseTraceparent(formatTraceparent(started.ctx))).toEqual(started.ctx)
  })

  it('gives each child span a fresh id', () => {
    const root = startTrace()
    expect(root.traceId).toMatch(/^[0-9a-f]{32}$/)
    expect(childSpan(root).spanId).not.toBe(childSpan(root).spanId)
  })
})
