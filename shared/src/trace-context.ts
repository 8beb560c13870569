/**
 * W3C Trace Context `traceparent`: `<version>-<trace-id>-<parent-id>-<flags>`, lowercase hex,
 * e.g. `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`. The edge continues the
 * client's trace (or starts one) and sends its own span as the node's parent.
 */
import { randomHex } from './random-pool.ts'

export interface TraceContext {
  /** 32 hex chars, not all zero. */
  traceId: string
  /** This hop's span id: 16 hex chars, not all zero. */
  spanId: string
  /** Trace flags byte; bit 0 is "sampled". */
  flags: number
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/

/** The caller's context, or undefined when absent or invalid (the spec says: then start a new trace). */
export function parseTraceparent(header: string | null | undefined): TraceContext | undefined {
  const m = header ? TRACEPARENT.exec(header.trim()) : null
  if (!m) return undefined
  const [, version, traceId, spanId, flags, rest] = m as unknown as [string, string, string, string, string, string | undefined]
  // Version ff is forbidden; version 00 has exactly four fields; later versions may append more.
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined
  if (isAllZero(traceId) || isAllZero(spanId)) return undefined
  return { traceId, spanId, flags: parseInt(flags, 16) }
}

export function formatTraceparent(ctx: TraceContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-${ctx.flags.toString(16).padStart(2, '0')}`
}

/** A new root trace, sampled by default. */
export function startTrace(sampled = true): TraceContext {
  return { traceId: randomHex(16), spanId: newSpanId(), flags: sampled ? 1 : 0 }
}

/** A child span of `parent`: same trace and flags, new span id. */
export function childSpan(parent: TraceContext): TraceContext {
  return { traceId: parent.traceId, spanId: newSpanId(), flags: parent.flags }
}

/** Continues the incoming header's trace with a new span, or starts a trace when it is absent or invalid. */
export function continueTrace(header: string | null | undefined): { ctx: TraceContext; parentSpanId?: string } {
  const parent = parseTraceparent(header)
  return parent ? { ctx: childSpan(parent), parentSpanId: parent.spanId } : { ctx: startTrace() }
}

export function newSpanId(): string {
  return randomHex(8)
}

function isAllZero(hex: string): boolean {
  return /^0+$/.test(hex)
}
