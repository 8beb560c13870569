/**
 * Engine scenario 2, engine overhead, measured inside scenario 1's rounds (engine-throughput.ts):
 * in the continuous run, the steady-state window is the longest run of ticks that decode all 32
 * rows and prefill nothing. Engine tokens/s there = 32 × ticks / wall time of those ticks (from
 * the return of the tick before the window to the return of its last tick: scheduling, worker
 * round trips, sampling, detokenizing and event delivery included). The reference is raw ONNX
 * Runtime in its own worker thread of this process (bench/rig/raw-ort-worker.ts), where the
 * runner runs its session: the same session options, batch 32, the same number of decode steps
 * over the same KV width range (past = window start width, growing by one per step), driving the
 * graph the runner drives: a concat (Optimum) graph's `present.*` fed back as the next
 * `past_key_values.*`, or a slot graph's new K/V written into fixed-capacity buffers grown as the
 * runner grows its own (the worker's header says what is timed); tokens/s = 32 × steps / Σ step
 * time. It is measured right before (from the second round on) and right after the continuous
 * run, and averaged. The runner alone (bench/step-time.ts logic: OnnxRunner.step back to back) is
 * measured too in full runs, splitting the gap into worker-side and engine-side parts.
 */
import { performance } from 'node:perf_hooks'
import { Worker } from 'node:worker_threads'
import { GREEDY } from '../../gpu-node/src/engine/types.ts'
import type { ModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { OnnxRunner } from '../../gpu-node/src/model/onnx-runner.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round } from '../lib/stats.ts'
import { promptFor, STREAMS, type EngineRig, type StepRecord } from './engine-rig.ts'
import type { RoundProbe, ThroughputRounds } from './engine-throughput.ts'

interface SteadyWindow {
  ticks: number
  startWidth: number
  endWidth: number
  wallMs: number
  tokPerS: number
  /** Σ worker-side decode time (session.run + KV bookkeeping + sampling). */
  workerDecodeMs: number
  /** Σ (round trip − worker time): thread hops and message (de)serialisation. */
  roundTripExtraMs: number
  /** Σ main-thread time between a step's return and the next call (scheduler, detokenizer, events). */
  mainThreadMs: number
}

function steadyWindow(steps: StepRecord[], rows: number): SteadyWindow | undefined {
  let best: [number, number] | undefined
  let start = -1
  for (let k = 0; k <= steps.length; k++) {
    const ok = k < steps.length && steps[k].decodeRows === rows && steps[k].prefillParts === 0
    if (ok && start < 0) start = k
    if (!ok && start >= 0) {
      if (start >= 1 && (!best || k - start > best[1] - best[0])) best = [start, k]
      start = -1
    }
  }
  if (!best) return undefined
  const [k0, k1] = best
  const window = steps.slice(k0, k1)
  const wallMs = steps[k1 - 1].returnAt - steps[k0 - 1].returnAt
  let workerDecodeMs = 0
  let roundTripExtraMs = 0
  let mainThreadMs = 0
  window.forEach((s, i) => {
    workerDecodeMs += s.decodeMs
    roundTripExtraMs += s.returnAt - s.callAt - s.decodeMs - s.prefillMs
    mainThreadMs += s.callAt - steps[k0 - 1 + i].returnAt
  })
  return {
    ticks: window.length,
    startWidth: steps[k0 - 1].kvTokens,
    endWidth: steps[k1 - 1].kvTokens,
    wallMs,
    tokPerS: (rows * window.length * 1000) / wallMs,
    workerDecodeMs,
    roundTripExtraMs,
    mainThreadMs,
  }
}

/** Bare ONNX Runtime in its own worker thread (bench/rig/raw-ort-worker.ts), as the runner runs its session. */
class RawOrt {
  private nextId = 1
  private constructor(private readonly worker: Worker) {}

  static async start(dir: ModelDir, ep: 'cpu' | 'cuda'): Promise<RawOrt> {
    const entry = new URL('../rig/raw-ort-worker.ts', import.meta.url)
    const tsx = import.meta.resolve('tsx/esm/api')
    const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(entry.href)}) })`
    const worker = new Worker(boot, { eval: true, workerData: { onnxPath: dir.onnxPath, config: dir.config, executionProvider: ep } })
    await new Promise<void>((resolve, reject) => {
      worker.once('message', () => resolve())
      worker.once('error', reject)
    })
    return new RawOrt(worker)
  }

  /** Σ session.run time of `steps` decode steps at batch `rows` from past width `w0`. */
  decode(rows: number, w0: number, steps: number): Promise<{ totalMs: number; tokPerS: number }> {
    const id = this.nextId++
    return new Promise((resolve, reject) => {
      const onMsg = (m: { id?: number; stepMs?: number[]; error?: string }) => {
        if (m.id !== id) return
        this.worker.off('message', onMsg)
        if (m.error || !m.stepMs) return reject(new Error(`raw ONNX Runtime: ${m.error}`))
        const totalMs = m.stepMs.reduce((a, b) => a + b, 0)
        resolve({ totalMs, tokPerS: (rows * steps * 1000) / totalMs })
      }
      this.worker.on('message', onMsg)
      this.worker.postMessage({ id, rows, w0, steps })
    })
  }

  close(): Promise<number> {
    return this.worker.terminate()
  }
}

/** bench/step-time.ts's measurement: the worker runner alone, prefill `rows` prompts of `w0` tokens, then `steps` decode steps back to back. */
export async function runnerDecode(runner: OnnxRunner, rows: number, w0: number, steps: number, vocab: number, eos: number[], seqBase: number): Promise<{ totalMs: number; tokPerS: number }> {
  const ids: number[] = []
  for (let i = 0; i < rows; i++) {
    const seqId = seqBase + i
    ids.push(seqId)
    const tokens = promptFor(i, vocab, eos).concat(promptFor(i + 1000, vocab, eos)).concat(promptFor(i + 2000, vocab, eos)).concat(promptFor(i + 3000, vocab, eos)).concat(promptFor(i + 4000, vocab, eos)).slice(0, w0)
    await runner.step({ release: [], decode: false, prefill: [{ seqId, tokens, last: true, start: { sampling: GREEDY, promptLen: tokens.length, banEos: true, tokens } }] })
  }
  let totalMs = 0
  for (let s = 0; s < steps; s++) {
    const t0 = performance.now()
    await runner.step({ release: [], decode: true, prefill: [] })
    totalMs += performance.now() - t0
  }
  await runner.step({ release: ids, decode: false, prefill: [] })
  return { totalMs, tokPerS: (rows * steps * 1000) / totalMs }
}

const NO_WINDOW = 'continuous run had no steady-state window (all rows decoding, no prefill)'

/**
 * The references (a bare runner and bare ONNX Runtime, each in its worker thread) and what the
 * throughput rounds measured against them.
 */
export class OverheadProbe implements RoundProbe {
  readonly breakdowns: unknown[] = []
  private lastWindow: SteadyWindow | undefined
  private window: SteadyWindow | undefined
  private ortRuns: Array<{ totalMs: number; tokPerS: number }> = []

  private constructor(
    private readonly ctx: BenchContext,
    private readonly rig: EngineRig,
    private readonly bareRunner: OnnxRunner,
    private readonly rawOrt: RawOrt,
  ) {}

  static async start(ctx: BenchContext, rig: EngineRig, dir: ModelDir, ep: 'cpu' | 'cuda'): Promise<OverheadProbe> {
    const bareRunner = await OnnxRunner.start(dir, { executionProvider: ep })
    const rawOrt = await RawOrt.start(dir, ep)
    return new OverheadProbe(ctx, rig, bareRunner, rawOrt)
  }

  startRound(): void {
    this.window = undefined
    this.ortRuns = []
  }

  /**
   * Raw ONNX Runtime brackets the continuous run (right before, with the previous round's window,
   * which the deterministic scheduler repeats; and right after), so drift in the machine's load
   * between the two measurements mostly cancels. --quick: after only.
   */
  async beforeContinuous(): Promise<void> {
    if (this.lastWindow && !this.ctx.quick) this.ortRuns.push(await this.rawOrt.decode(STREAMS, this.lastWindow.startWidth, this.lastWindow.ticks))
  }

  async afterContinuous(steps: StepRecord[]): Promise<void> {
    const window = steadyWindow(steps, STREAMS)
    if (!window) throw new Error(NO_WINDOW)
    if (this.lastWindow && (this.lastWindow.startWidth !== window.startWidth || this.lastWindow.ticks !== window.ticks)) this.ortRuns.length = 0
    this.ortRuns.push(await this.rawOrt.decode(STREAMS, window.startWidth, window.ticks))
    this.lastWindow = window
    this.window = window
  }

  /** The round's overhead figures into `row`, and its steady-state breakdown. */
  async endRound(r: number, rounds: number, row: Record<string, number>): Promise<void> {
    const { ctx, rig } = this
    const window = this.window
    if (!window) throw new Error(NO_WINDOW)
    const ortTotalMs = this.ortRuns.reduce((s, x) => s + x.totalMs, 0) / this.ortRuns.length
    const ortRun = { totalMs: ortTotalMs, tokPerS: (STREAMS * window.ticks * 1000) / ortTotalMs, measurements: this.ortRuns.length }
    // The bare runner splits the gap (worker side vs engine side); skipped in --quick.
    const runnerRun = ctx.quick ? { totalMs: NaN, tokPerS: NaN } : await runnerDecode(this.bareRunner, STREAMS, window.startWidth, window.ticks, rig.vocab, rig.eos, 1_000_000 * (r + 1))
    row.engine_steady_tok_s = window.tokPerS
    row.raw_ort_tok_s = ortRun.tokPerS
    row.runner_tok_s = runnerRun.tokPerS
    row.engine_over_raw_ort = window.tokPerS / ortRun.tokPerS
    this.breakdowns.push({
      round: r + 1,
      window_ticks: window.ticks,
      kv_width: [window.startWidth, window.endWidth],
      engine_ms_per_tick: round(window.wallMs / window.ticks),
      worker_decode_ms_per_tick: round(window.workerDecodeMs / window.ticks),
      round_trip_extra_ms_per_tick: round(window.roundTripExtraMs / window.ticks),
      main_thread_ms_per_tick: round(window.mainThreadMs / window.ticks),
      raw_ort_ms_per_step: round(ortRun.totalMs / window.ticks),
      raw_ort_measurements: ortRun.measurements,
      runner_ms_per_step: round(runnerRun.totalMs / window.ticks),
    })
    ctx.log(
      `round ${r + 1}/${rounds} steady state B=${STREAMS}, width ${window.startWidth}→${window.endWidth}, ${window.ticks} ticks: engine ${window.tokPerS.toFixed(0)} tok/s, ` +
        `${ctx.quick ? '' : `bare runner ${runnerRun.tokPerS.toFixed(0)}, `}raw ORT ${ortRun.tokPerS.toFixed(0)} → engine/raw ${(window.tokPerS / ortRun.tokPerS).toFixed(3)}`,
    )
  }

  /** The medians over rounds into `raw`; returns the section's engine / raw ONNX Runtime figure. */
  report(raw: Record<string, unknown>, rounds: ThroughputRounds): number {
    const { med } = rounds
    raw.steady_state_breakdown = this.breakdowns
    raw.engine_steady_tok_s = round(med('engine_steady_tok_s'))
    raw.raw_ort_tok_s = round(med('raw_ort_tok_s'))
    raw.runner_tok_s = round(med('runner_tok_s'))
    raw.runner_over_raw_ort = round(med('runner_tok_s') / med('raw_ort_tok_s'))
    // What continuous / one-at-a-time could be if every tick ran at raw ONNX Runtime's batch-32
    // steady-state rate (no prefill ramp, no tail): the model step's own ceiling for the figure.
    raw.continuous_over_sequential_ceiling = round(median(rounds.rows.map((x) => x.raw_ort_tok_s / x.sequential_tok_s)))
    raw.engine_over_runner = round(med('engine_steady_tok_s') / med('runner_tok_s'))
    return round(med('engine_over_raw_ort'))
  }

  async close(): Promise<void> {
    await this.bareRunner.close().catch(() => {})
    await this.rawOrt.close().catch(() => 0)
  }
}
