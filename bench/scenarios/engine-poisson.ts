/**
 * Engine scenario 3, Poisson arrivals at 80 % of static-8 capacity (capacity = requests / the
 * static closed-batch run's wall time, from scenario 1's rounds: engine-throughput.ts), the same
 * arrival schedule for each mode, in rounds (modes back to back, order rotated) → median over
 * rounds of p99 TTFT static-8 / continuous. Further offered loads make the throughput/TTFT chart.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { openLoop } from '../load/generators.ts'
import type { BenchContext, ChartSeries } from '../lib/report-types.ts'
import { median, percentile, poissonArrivals, round, summarize } from '../lib/stats.ts'
import { MODES, NEW_TOKENS, promptFor, rotate, submitJob, type BenchEngine, type EngineRig, type JobResult, type Mode } from './engine-rig.ts'
import type { ThroughputRounds } from './engine-throughput.ts'

interface LoadPoint {
  offeredRps: number
  requests: number
  completed: number
  rejected: number
  /** Requests that had no first token when the run was cut off (their TTFT counts as the time they waited). */
  censored: number
  throughputTokS: number
  ttftMs: ReturnType<typeof summarize>
  p99TtftMs: number
}

interface PoissonResult {
  point: LoadPoint
  ttfts: number[]
  /** Tokens generated in the measured part of the window, and its length. */
  windowTokens: number
  windowMs: number
}

export interface PoissonOutcome {
  /** The section's figure: median over rounds of p99 TTFT static-8 / continuous. */
  static8OverContinuousP99: number
  chart: ChartSeries[]
}

async function poissonRun(b: BenchEngine, rps: number, count: number, windowMs: number, drainMs: number, seed: number, vocab: number, eos: number[]): Promise<PoissonResult> {
  const arrivals = poissonArrivals(rps, count, seed)
  const deadlineMs = Math.min(windowMs, arrivals[arrivals.length - 1])
  const tokenTimes: number[] = []
  const run = await openLoop<JobResult>({
    arrivalsMs: arrivals,
    deadlineMs,
    drainMs,
    maxInFlight: 2000,
    run: (i, signal) => submitJob(b, promptFor(i, vocab, eos), NEW_TOKENS, signal, tokenTimes),
  })
  const cutAt = run.startedAt + deadlineMs + drainMs
  const sent = run.results.filter((r): r is JobResult => r !== undefined)
  const ttfts: number[] = []
  let censored = 0
  for (const r of sent) {
    if (r.rejected) continue
    if (r.firstTextAt !== undefined) ttfts.push(r.firstTextAt - r.submittedAt)
    else {
      censored++
      ttfts.push(Math.min(cutAt, r.finishedAt ?? cutAt) - r.submittedAt)
    }
  }
  // Throughput over the last three quarters of the arrival window: the first quarter is the
  // ramp-up (a request needs ~96 steps to finish, so an empty engine under-counts at first).
  const from = run.startedAt + deadlineMs / 4
  const to = run.startedAt + deadlineMs
  const inWindow = tokenTimes.filter((t) => t > from && t <= to).length
  // Let aborted sequences' release ticks run.
  await sleep(50)
  const point: LoadPoint = {
    offeredRps: rps,
    requests: sent.length,
    completed: sent.filter((r) => r.reason === 'length' || r.reason === 'stop').length,
    rejected: sent.filter((r) => r.rejected).length,
    censored,
    throughputTokS: (inWindow * 1000) / (to - from),
    ttftMs: summarize(ttfts),
    p99TtftMs: percentile(ttfts, 99),
  }
  return { point, ttfts, windowTokens: inWindow, windowMs: to - from }
}

/** Several runs of one mode at one load, pooled into one point. */
function pooled(runs: PoissonResult[]): LoadPoint {
  const ttfts = runs.flatMap((r) => r.ttfts)
  const sum = (f: (p: LoadPoint) => number) => runs.reduce((n, r) => n + f(r.point), 0)
  return {
    offeredRps: runs[0].point.offeredRps,
    requests: sum((p) => p.requests),
    completed: sum((p) => p.completed),
    rejected: sum((p) => p.rejected),
    censored: sum((p) => p.censored),
    throughputTokS: (runs.reduce((n, r) => n + r.windowTokens, 0) * 1000) / runs.reduce((n, r) => n + r.windowMs, 0),
    ttftMs: summarize(ttfts),
    p99TtftMs: percentile(ttfts, 99),
  }
}

export async function runPoisson(ctx: BenchContext, rig: EngineRig, rounds: ThroughputRounds, raw: Record<string, unknown>, notes: string[]): Promise<PoissonOutcome> {
  const { engines, vocab, eos } = rig
  // Capacity of static-8 = its streams per round / its closed-batch wall time.
  const staticCapRps = (rounds.staticStreams * 1000) / rounds.med('static8_wall_ms')
  raw.static8_capacity_rps = round(staticCapRps)
  // The key comparison runs in rounds, the two modes back to back in rotated order with the same
  // arrival schedule, so a burst of load from elsewhere on the machine hits one round, not one
  // mode; the figure is the median of the per-round ratios (pooled p99s are reported too).
  const keyRounds = ctx.quick ? 2 : 4
  const keyPerRound = ctx.quick ? 12 : 36
  const keyRps = 0.8 * staticCapRps
  const chartLevels = ctx.quick ? [1.25] : [0.25, 0.5, 1.0, 1.25, 1.5]
  const windowMs = ctx.quick ? 4000 : 12_000
  const points: Record<Mode, LoadPoint[]> = { continuous: [], static8: [], sequential: [] }
  ctx.log(`Poisson at 80 % of static-8 capacity (${staticCapRps.toFixed(2)} req/s): ${keyRps.toFixed(2)} req/s, ${keyRounds} rounds × ${keyPerRound} requests per mode, same arrivals per mode`)
  const keyRuns: Record<'continuous' | 'static8', PoissonResult[]> = { continuous: [], static8: [] }
  const keyRatios: number[] = []
  for (let r = 0; r < keyRounds; r++) {
    const p99: Record<string, number> = {}
    for (const m of rotate(['continuous', 'static8'] as const, r)) {
      const res = await poissonRun(engines[m], keyRps, keyPerRound, 600_000, 60_000, 8080 + r, vocab, eos)
      keyRuns[m].push(res)
      p99[m] = res.point.p99TtftMs
    }
    keyRatios.push(p99.static8 / p99.continuous)
    ctx.log(`  round ${r + 1}/${keyRounds}: p99 TTFT continuous ${p99.continuous.toFixed(0)} ms, static-8 ${p99.static8.toFixed(0)} ms → ${(p99.static8 / p99.continuous).toFixed(2)}×`)
  }
  const keyPoints = {
    continuous: pooled(keyRuns.continuous),
    static8: pooled(keyRuns.static8),
    // One at a time is far beyond its capacity at this load: one window, for the chart.
    sequential: (await poissonRun(engines.sequential, keyRps, Math.ceil((keyRps * windowMs) / 1000), windowMs, ctx.quick ? 1000 : 3000, 8080, vocab, eos)).point,
  } satisfies Record<Mode, LoadPoint>
  for (const m of MODES) {
    points[m].push(keyPoints[m])
    const p = keyPoints[m]
    ctx.log(`  ${m.padEnd(10)} pooled: p50 TTFT ${p.ttftMs.p50.toFixed(0)} ms, p99 ${p.p99TtftMs.toFixed(0)} ms, ${p.throughputTokS.toFixed(0)} tok/s${p.censored ? `, ${p.censored} cut off before their first token` : ''}`)
  }
  for (const level of chartLevels) {
    const rps = level * staticCapRps
    for (const m of rotate(MODES, Math.round(level * 4))) {
      const p = (await poissonRun(engines[m], rps, Math.max(4, Math.ceil((rps * windowMs) / 1000)), windowMs, ctx.quick ? 1000 : 3000, 9090 + Math.round(level * 100), vocab, eos)).point
      points[m].push(p)
      ctx.log(`  load ${level.toFixed(2)}× (${rps.toFixed(2)} req/s) ${m.padEnd(10)} ${p.throughputTokS.toFixed(0)} tok/s, p99 TTFT ${p.p99TtftMs.toFixed(0)} ms${p.censored ? ` (${p.censored} cut off)` : ''}`)
    }
  }
  raw.poisson_80pct = { ...Object.fromEntries(MODES.map((m) => [m, keyPoints[m]])), static8_over_continuous_p99_per_round: keyRatios.map((x) => round(x)), pooled_static8_over_continuous_p99: round(keyPoints.static8.p99TtftMs / keyPoints.continuous.p99TtftMs) }
  raw.load_sweep = Object.fromEntries(MODES.map((m) => [m, [...points[m]].sort((a, b) => a.offeredRps - b.offeredRps)]))
  if (keyPoints.static8.censored || keyPoints.continuous.censored) notes.push('Some Poisson requests at 80 % load had no first token when the run was cut off; their TTFT counts as the time they had waited (a lower bound).')
  notes.push(`Poisson chart points are open-loop windows of ${windowMs / 1000} s (the 80 % points: ${keyRounds} rounds of ${keyPerRound} arrivals, pooled); throughput counts tokens generated in the last three quarters of the arrival window; requests still waiting for a first token at the cut-off count with the time they had waited (a lower bound), so overloaded modes are drawn optimistically.`)

  const chart: ChartSeries[] = MODES.map((m) => ({
    mode: m === 'static8' ? 'static batches of 8' : m === 'sequential' ? 'one at a time' : 'continuous',
    points: [...points[m]].sort((a, b) => a.offeredRps - b.offeredRps).map((p) => ({ offeredRps: round(p.offeredRps), throughputTokS: round(p.throughputTokS), p99TtftMs: round(p.p99TtftMs), censored: p.censored })),
  }))
  return { static8OverContinuousP99: round(median(keyRatios)), chart }
}
