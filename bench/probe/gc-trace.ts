/**
 * Bench-only preload (`node --import ./bench/probe/gc-trace.ts …`): V8's garbage collections as
 * PerformanceObserver sees them (epoch start, duration, kind), buffered in the process and
 * written as JSON to GC_TRACE_OUT (then emptied) on each SIGUSR2, which then prints
 * {"msg":"gc-trace written"}. No product hook: the observer is the process's own.
 */
import { writeFileSync } from 'node:fs'
import { constants, PerformanceObserver, performance, type PerformanceEntry } from 'node:perf_hooks'

const out = process.env.GC_TRACE_OUT
if (!out) throw new Error('GC_TRACE_OUT is required')
const KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
}
const events: Array<{ atMs: number; ms: number; kind: string }> = []
new PerformanceObserver((list) => {
  // Node's gc entries carry `detail.kind`; @types/node types them as plain PerformanceEntry.
  for (const e of list.getEntries() as Array<PerformanceEntry & { detail?: { kind: number } }>) {
    events.push({ atMs: performance.timeOrigin + e.startTime, ms: e.duration, kind: KINDS[e.detail?.kind ?? -1] ?? 'other' })
  }
}).observe({ entryTypes: ['gc'] })
process.on('SIGUSR2', () => {
  writeFileSync(out, JSON.stringify(events.splice(0)))
  console.log(JSON.stringify({ msg: 'gc-trace written' }))
})
