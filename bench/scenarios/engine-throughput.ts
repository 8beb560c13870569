/**
 * Engine scenario 1, throughput, in rounds (modes interleaved, order rotated per round, medians
 * over rounds): 32 streams × 32-token prompts × 96 new tokens (ignore EOS), all submitted at once,
 * for continuous batching, static batches of 8 and one at a time (maxBatch 1);
 * tokens/s = generated tokens / (first submit → last finish).
 *
 * Scenario 2 (engine-overhead.ts) is measured inside these rounds, around each continuous run, and
 * scenario 3 (engine-poisson.ts) takes static-8's capacity from them.
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round } from '../lib/stats.ts'
import { NEW_TOKENS, promptFor, rotate, STREAMS, submitJob, type BenchEngine, type EngineRig, type StepRecord } from './engine-rig.ts'

interface BatchRun {
  tokens: number
  wallMs: number
  tokPerS: number
  steps: StepRecord[]
}

/** The rounds' figures, one row per round (`<mode>_tok_s`, `<mode>_wall_ms`, `<mode>_streams`, and the overhead probe's). */
export interface ThroughputRounds {
  rows: Array<Record<string, number>>
  /** Streams of each static-8 run (its rate does not depend on the count). */
  staticStreams: number
  /** The median over rounds of one row key. */
  med(key: string): number
}

/**
 * What else is measured around the rounds' continuous run (engine-overhead.ts's OverheadProbe):
 * called at each round's start, right before and right after its continuous run, and once its
 * other modes ran too (it may add its figures to the round's row).
 */
export interface RoundProbe {
  startRound(): void
  beforeContinuous(): Promise<void>
  afterContinuous(steps: StepRecord[]): Promise<void>
  endRound(r: number, rounds: number, row: Record<string, number>): Promise<void>
}

async function batchRun(b: BenchEngine, streams: number, vocab: number, eos: number[]): Promise<BatchRun> {
  b.timed.steps = []
  const t0 = performance.now()
  const results = await Promise.all(Array.from({ length: streams }, (_, i) => submitJob(b, promptFor(i, vocab, eos), NEW_TOKENS)))
  const end = Math.max(...results.map((r) => r.finishedAt ?? t0))
  const tokens = results.reduce((n, r) => n + r.tokens, 0)
  const wallMs = end - t0
  // Let the release-only tick run before anything else is measured.
  await sleep(20)
  return { tokens, wallMs, tokPerS: (tokens * 1000) / wallMs, steps: b.timed.steps }
}

export async function runThroughput(ctx: BenchContext, rig: EngineRig, probe: RoundProbe, raw: Record<string, unknown>, notes: string[]): Promise<ThroughputRounds> {
  const rounds = ctx.quick ? 2 : 4
  const seqStreams = ctx.quick ? 4 : 12
  // Static-8 runs whole batches of 8 back to back: 16 streams measure the same rate as 32.
  const staticStreams = ctx.quick ? 16 : STREAMS
  const perRound: Array<Record<string, number>> = []

  for (let r = 0; r < rounds; r++) {
    const order = rotate(['continuous', 'static8', 'sequential'] as const, r)
    const row: Record<string, number> = {}
    probe.startRound()
    for (const what of order) {
      const streams = what === 'sequential' ? seqStreams : what === 'static8' ? staticStreams : STREAMS
      if (what === 'continuous') await probe.beforeContinuous()
      const run = await batchRun(rig.engines[what], streams, rig.vocab, rig.eos)
      row[`${what}_tok_s`] = run.tokPerS
      row[`${what}_wall_ms`] = run.wallMs
      row[`${what}_streams`] = streams
      ctx.log(`round ${r + 1}/${rounds} ${what.padEnd(10)} ${streams} × ${NEW_TOKENS} tokens in ${(run.wallMs / 1000).toFixed(2)} s → ${run.tokPerS.toFixed(0)} tok/s`)
      if (what === 'continuous') await probe.afterContinuous(run.steps)
    }
    await probe.endRound(r, rounds, row)
    row.continuous_over_sequential = row.continuous_tok_s / row.sequential_tok_s
    perRound.push(row)
  }
  const med = (k: string) => median(perRound.map((x) => x[k]))
  raw.throughput_rounds = perRound.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, round(v)])))
  raw.continuous_tok_s = round(med('continuous_tok_s'))
  raw.static8_tok_s = round(med('static8_tok_s'))
  raw.sequential_tok_s = round(med('sequential_tok_s'))
  notes.push(`One-at-a-time throughput is measured on ${seqStreams} streams per round and static-8 on ${staticStreams} (rates: the count does not change them) to keep the run short.`)
  return { rows: perRound, staticStreams, med }
}
