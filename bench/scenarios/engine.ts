/**
 * Engine scenarios (issue 6) on the `small` preset, in this process, through the product's own
 * Engine, scheduler, batching policies and ONNX Runtime worker runner:
 *
 * 1. Throughput, in rounds (modes interleaved, order rotated per round, medians over rounds):
 *    32 streams × 32-token prompts × 96 new tokens (ignore EOS), all submitted at once, for
 *    continuous batching, static batches of 8 and one at a time (maxBatch 1);
 *    tokens/s = generated tokens / (first submit → last finish).
 * 2. Engine overhead: in the continuous run, the steady-state window is the longest run of
 *    ticks that decode all 32 rows and prefill nothing. Engine tokens/s there =
 *    32 × ticks / wall time of those ticks (from the return of the tick before the window to the
 *    return of its last tick: scheduling, worker round trips, sampling, detokenizing and event
 *    delivery included). The reference is raw ONNX Runtime in its own worker thread of this
 *    process (bench/probe/raw-ort-worker.ts), where the runner runs its session: the same
 *    session options, batch 32, the same number of decode steps over the same KV width range
 *    (past = window start width, growing by one per step), driving the graph the runner drives:
 *    a concat (Optimum) graph's `present.*` fed back as the next `past_key_values.*`, or a slot
 *    graph's new K/V written into fixed-capacity buffers grown as the runner grows its own (the
 *    worker's header says what is timed); tokens/s = 32 × steps / Σ step time. It is measured
 *    right before (from the second round on) and right after the continuous run, and averaged.
 *    The runner alone (bench/step-time.ts logic: OnnxRunner.step back to back) is measured too in
 *    full runs, splitting the gap into worker-side and engine-side parts.
 * 3. Poisson arrivals at 80 % of static-8 capacity (capacity = requests / the static closed-batch
 *    run's wall time), the same arrival schedule for each mode, in rounds (modes back to back,
 *    order rotated) → median over rounds of p99 TTFT static-8 / continuous. Further offered loads
 *    make the throughput/TTFT chart.
 * 4. Over HTTP, against a real GPU node process (small model, default settings): idle TTFT minus
 *    the prefill step's duration (the node's zl_step_duration_seconds sum delta, one step, for a
 *    max_tokens 1 request), and the socket thread's event-loop delay p99 under full load
 *    (monitorEventLoopDelay preloaded into the node process, bench/probe/event-loop-delay.ts),
 *    with a /healthz probe latency alongside.
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { Worker } from 'node:worker_threads'
import { continuousBatching, staticBatching, type BatchingPolicy } from '../../gpu-node/src/engine/batching-policy.ts'
import { Engine } from '../../gpu-node/src/engine/engine.ts'
import { GREEDY } from '../../gpu-node/src/engine/types.ts'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { readModelDir, type ModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { OnnxRunner } from '../../gpu-node/src/model/onnx-runner.ts'
import type { ModelRunner, StepPlan, StepResult } from '../../gpu-node/src/model/runner.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import { benchAgent, sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody, type BenchDialect } from '../load/dialects.ts'
import { closedLoop, openLoop } from '../load/generators.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { chatPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext, ChartSeries, SectionResult } from '../lib/report-types.ts'
import { startGpuNode } from '../lib/services.ts'
import { median, percentile, poissonArrivals, round, summarize } from '../lib/stats.ts'

const STREAMS = 32
const PROMPT_TOKENS = 32
const NEW_TOKENS = 96
const STATIC_SIZE = 8
/** A static batch also starts when its oldest member has waited this long (a common batcher timeout). */
const STATIC_WAIT_MS = 50
const KV_BUDGET_MB = 512
const PREFILL_CHUNK = 128

type Mode = 'continuous' | 'static8' | 'sequential'
const MODES: Mode[] = ['continuous', 'static8', 'sequential']

export interface EngineOptions {
  modelDir?: string
}

export async function runEngine(ctx: BenchContext, opts: EngineOptions = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/small'
  if (await ensureGeneratedModel(modelDir, (l) => ctx.log(l))) ctx.log(`generated ${modelDir}`)
  const ep = process.env.EXECUTION_PROVIDER === 'cuda' ? 'cuda' : 'cpu'
  const notes: string[] = []
  const raw: Record<string, unknown> = { model: modelDir, execution_provider: ep, streams: STREAMS, prompt_tokens: PROMPT_TOKENS, new_tokens: NEW_TOKENS, static_wait_ms: STATIC_WAIT_MS }

  const inProcess = await runInProcess(ctx, modelDir, ep, raw, notes)
  const overHttp = await runOverHttp(ctx, modelDir, raw, notes)
  return {
    figures: { ...inProcess.figures, ...overHttp },
    raw,
    notes,
    chart: inProcess.chart,
  }
}

// ---------------------------------------------------------------------------------------------
// In-process: throughput, overhead, Poisson

interface StepRecord {
  callAt: number
  returnAt: number
  decodeMs: number
  prefillMs: number
  decodeRows: number
  prefillParts: number
  kvTokens: number
}

/** The product's runner, with each step's timing written down (costs two performance.now()). */
class TimedRunner implements ModelRunner {
  steps: StepRecord[] = []
  constructor(private readonly inner: ModelRunner) {}
  get info() {
    return this.inner.info
  }
  async step(plan: StepPlan): Promise<StepResult> {
    const callAt = performance.now()
    const r = await this.inner.step(plan)
    const returnAt = performance.now()
    this.steps.push({ callAt, returnAt, decodeMs: r.decodeMs, prefillMs: r.prefillMs, decodeRows: r.decoded.seqIds.length, prefillParts: plan.prefill.length, kvTokens: r.kvTokens })
    return r
  }
  close() {
    return this.inner.close()
  }
}

interface BenchEngine {
  mode: Mode
  engine: Engine
  timed: TimedRunner
}

interface JobResult {
  submittedAt: number
  firstTextAt?: number
  finishedAt?: number
  tokens: number
  reason?: string
  rejected?: boolean
}

let nextJob = 1

function promptFor(i: number, vocab: number, eos: number[]): number[] {
  return Array.from({ length: PROMPT_TOKENS }, (_, j) => {
    let t = 100 + ((i * 7919 + j * 104729) % (vocab - 200))
    while (eos.includes(t)) t++
    return t
  })
}

/** Submits one request; resolves at its finish. `tokenTimes` collects one timestamp per generated token. */
function submitJob(b: BenchEngine, prompt: number[], maxTokens: number, signal?: AbortSignal, tokenTimes?: number[]): Promise<JobResult> {
  const id = `bench-${nextJob++}`
  const res: JobResult = { submittedAt: performance.now(), tokens: 0 }
  return new Promise((resolve) => {
    const onAbort = () => b.engine.abort(id)
    const r = b.engine.submit({ id, promptTokens: prompt, maxTokens, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }, (ev) => {
      const t = performance.now()
      if (ev.type === 'text') {
        res.firstTextAt ??= t
        if (tokenTimes) for (let k = res.tokens; k < ev.completionTokens; k++) tokenTimes.push(t)
        res.tokens = ev.completionTokens
        return
      }
      res.finishedAt = t
      res.reason = ev.reason
      if (tokenTimes) for (let k = res.tokens; k < ev.usage.completionTokens; k++) tokenTimes.push(t)
      res.tokens = ev.usage.completionTokens
      signal?.removeEventListener('abort', onAbort)
      resolve(res)
    })
    if (!r.ok) {
      res.rejected = true
      res.finishedAt = performance.now()
      resolve(res)
      return
    }
    if (signal?.aborted) onAbort()
    else signal?.addEventListener('abort', onAbort, { once: true })
  })
}

async function makeEngine(dir: ModelDir, tokenizer: ModelTokenizer, ep: 'cpu' | 'cuda', mode: Mode): Promise<BenchEngine> {
  const kvBudgetBytes = KV_BUDGET_MB * 1024 * 1024
  const runner = await OnnxRunner.start(dir, { executionProvider: ep, kvBudgetBytes })
  const timed = new TimedRunner(runner)
  const policy: BatchingPolicy = mode === 'static8' ? staticBatching(STATIC_SIZE, STATIC_WAIT_MS) : continuousBatching()
  // As loadModel (gpu-node/src/model/load-model.ts) builds it, with the runner wrapped for timing.
  const engine = new Engine({
    runner: timed,
    decoder: tokenizer,
    limits: { maxBatch: mode === 'sequential' ? 1 : STREAMS, maxQueue: 4096, kvBudgetBytes, prefillChunkTokens: PREFILL_CHUNK },
    policy,
  })
  return { mode, engine, timed }
}

interface BatchRun {
  tokens: number
  wallMs: number
  tokPerS: number
  steps: StepRecord[]
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

/** Bare ONNX Runtime in its own worker thread (bench/probe/raw-ort-worker.ts), as the runner runs its session. */
class RawOrt {
  private nextId = 1
  private constructor(private readonly worker: Worker) {}

  static async start(dir: ModelDir, ep: 'cpu' | 'cuda'): Promise<RawOrt> {
    const entry = new URL('../probe/raw-ort-worker.ts', import.meta.url)
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
async function runnerDecode(runner: OnnxRunner, rows: number, w0: number, steps: number, vocab: number, eos: number[], seqBase: number): Promise<{ totalMs: number; tokPerS: number }> {
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

async function runInProcess(ctx: BenchContext, modelDir: string, ep: 'cpu' | 'cuda', raw: Record<string, unknown>, notes: string[]) {
  const dir = readModelDir(modelDir)
  const tokenizer = new ModelTokenizer(dir)
  ctx.log(`loading ${modelDir} into 3 engines, a bare runner and a bare ONNX Runtime session, each in its worker thread (${ep})`)
  const engines = {} as Record<Mode, BenchEngine>
  for (const m of MODES) engines[m] = await makeEngine(dir, tokenizer, ep, m)
  const bareRunner = await OnnxRunner.start(dir, { executionProvider: ep })
  const rawOrt = await RawOrt.start(dir, ep)
  const vocab = dir.config.vocabSize
  const eos = dir.eosTokenIds
  try {
    const rounds = ctx.quick ? 2 : 4
    const seqStreams = ctx.quick ? 4 : 12
    // Static-8 runs whole batches of 8 back to back: 16 streams measure the same rate as 32.
    const staticStreams = ctx.quick ? 16 : STREAMS
    const perRound: Array<Record<string, number>> = []
    const breakdowns: unknown[] = []
    // Warm-up: one short batch per engine (first runs allocate arenas).
    ctx.log('warm-up')
    for (const m of MODES) await Promise.all(Array.from({ length: m === 'sequential' ? 1 : 4 }, (_, i) => submitJob(engines[m], promptFor(i, vocab, eos), 4)))
    await sleep(50)

    let lastWindow: SteadyWindow | undefined
    for (let r = 0; r < rounds; r++) {
      const order = rotate(['continuous', 'static8', 'sequential'] as const, r)
      const row: Record<string, number> = {}
      let window: SteadyWindow | undefined
      const ortRuns: Array<{ totalMs: number; tokPerS: number }> = []
      for (const what of order) {
        const streams = what === 'sequential' ? seqStreams : what === 'static8' ? staticStreams : STREAMS
        // Raw ONNX Runtime brackets the continuous run (right before, with the previous round's
        // window, which the deterministic scheduler repeats; and right after), so drift in the
        // machine's load between the two measurements mostly cancels. --quick: after only.
        if (what === 'continuous' && lastWindow && !ctx.quick) ortRuns.push(await rawOrt.decode(STREAMS, lastWindow.startWidth, lastWindow.ticks))
        const run = await batchRun(engines[what], streams, vocab, eos)
        row[`${what}_tok_s`] = run.tokPerS
        row[`${what}_wall_ms`] = run.wallMs
        row[`${what}_streams`] = streams
        ctx.log(`round ${r + 1}/${rounds} ${what.padEnd(10)} ${streams} × ${NEW_TOKENS} tokens in ${(run.wallMs / 1000).toFixed(2)} s → ${run.tokPerS.toFixed(0)} tok/s`)
        if (what === 'continuous') {
          window = steadyWindow(run.steps, STREAMS)
          if (!window) throw new Error('continuous run had no steady-state window (all rows decoding, no prefill)')
          if (lastWindow && (lastWindow.startWidth !== window.startWidth || lastWindow.ticks !== window.ticks)) ortRuns.length = 0
          ortRuns.push(await rawOrt.decode(STREAMS, window.startWidth, window.ticks))
          lastWindow = window
        }
      }
      if (!window) throw new Error('continuous run had no steady-state window (all rows decoding, no prefill)')
      const ortTotalMs = ortRuns.reduce((s, x) => s + x.totalMs, 0) / ortRuns.length
      const ortRun = { totalMs: ortTotalMs, tokPerS: (STREAMS * window.ticks * 1000) / ortTotalMs, measurements: ortRuns.length }
      // The bare runner splits the gap (worker side vs engine side); skipped in --quick.
      const runnerRun = ctx.quick ? { totalMs: NaN, tokPerS: NaN } : await runnerDecode(bareRunner, STREAMS, window.startWidth, window.ticks, vocab, eos, 1_000_000 * (r + 1))
      row.engine_steady_tok_s = window.tokPerS
      row.raw_ort_tok_s = ortRun.tokPerS
      row.runner_tok_s = runnerRun.tokPerS
      row.engine_over_raw_ort = window.tokPerS / ortRun.tokPerS
      row.continuous_over_sequential = row.continuous_tok_s / row.sequential_tok_s
      perRound.push(row)
      breakdowns.push({
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
    const med = (k: string) => median(perRound.map((x) => x[k]))
    raw.throughput_rounds = perRound.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, round(v)])))
    raw.steady_state_breakdown = breakdowns
    raw.continuous_tok_s = round(med('continuous_tok_s'))
    raw.static8_tok_s = round(med('static8_tok_s'))
    raw.sequential_tok_s = round(med('sequential_tok_s'))
    raw.engine_steady_tok_s = round(med('engine_steady_tok_s'))
    raw.raw_ort_tok_s = round(med('raw_ort_tok_s'))
    raw.runner_tok_s = round(med('runner_tok_s'))
    raw.runner_over_raw_ort = round(med('runner_tok_s') / med('raw_ort_tok_s'))
    // What continuous / one-at-a-time could be if every tick ran at raw ONNX Runtime's batch-32
    // steady-state rate (no prefill ramp, no tail): the model step's own ceiling for the figure.
    raw.continuous_over_sequential_ceiling = round(median(perRound.map((x) => x.raw_ort_tok_s / x.sequential_tok_s)))
    raw.engine_over_runner = round(med('engine_steady_tok_s') / med('runner_tok_s'))
    notes.push(`One-at-a-time throughput is measured on ${seqStreams} streams per round and static-8 on ${staticStreams} (rates: the count does not change them) to keep the run short.`)

    // Poisson: capacity of static-8 = STREAMS requests / its closed-batch wall time.
    const staticCapRps = (staticStreams * 1000) / med('static8_wall_ms')
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
    return {
      figures: {
        continuous_over_sequential_tokens_per_s: round(med('continuous_over_sequential')),
        engine_over_raw_ort_tokens_per_s: round(med('engine_over_raw_ort')),
        static8_over_continuous_p99_ttft: round(median(keyRatios)),
      },
      chart,
    }
  } finally {
    for (const m of MODES) await engines[m].engine.close().catch(() => {})
    await bareRunner.close().catch(() => {})
    await rawOrt.close().catch(() => 0)
  }
}

function rotate<T>(xs: readonly T[], by: number): T[] {
  const k = by % xs.length
  return [...xs.slice(k), ...xs.slice(0, k)]
}

// ---------------------------------------------------------------------------------------------
// Over HTTP: idle TTFT minus prefill, event-loop delay under full load

async function runOverHttp(ctx: BenchContext, modelDir: string, raw: Record<string, unknown>, notes: string[]): Promise<Record<string, number | null>> {
  ctx.log(`starting a GPU node (${modelDir}, default MAX_BATCH/threads) with the event-loop-delay probe`)
  const node = await startGpuNode({ modelDir, eldProbe: true })
  const agent = benchAgent()
  try {
    const prompt = chatPromptOfLength(modelDir, PROMPT_TOKENS)
    const oneToken = buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: 1, stream: true, ignoreEos: true })
    const send = (body: Uint8Array, dialect: BenchDialect = 'openai-chat', signal?: AbortSignal) => sendRequest({ origin: node.url, dialect, body, stream: true, dispatcher: agent, ...(signal ? { signal } : {}) })
    for (let i = 0; i < 3; i++) await send(oneToken)

    // Idle TTFT minus the prefill step: one request at a time, the node otherwise idle.
    const n = ctx.quick ? 10 : 40
    const diffs: number[] = []
    const ttfts: number[] = []
    const prefills: number[] = []
    let skipped = 0
    let before = parseProm(await node.metricsText())
    for (let i = 0; i < n; i++) {
      await sleep(30)
      const rec = await send(oneToken)
      await sleep(30)
      const after = parseProm(await node.metricsText())
      const steps = promValue(after, 'zl_step_duration_seconds_count') - promValue(before, 'zl_step_duration_seconds_count')
      const stepMs = (promValue(after, 'zl_step_duration_seconds_sum') - promValue(before, 'zl_step_duration_seconds_sum')) * 1000
      before = after
      if (rec.status !== 200 || rec.ttftMs === undefined || steps !== 1) {
        skipped++
        continue
      }
      ttfts.push(rec.ttftMs)
      prefills.push(stepMs)
      diffs.push(rec.ttftMs - stepMs)
    }
    raw.idle = { requests: n, skipped, prompt_tokens: prompt.tokens, ttft_ms: summarize(ttfts), prefill_step_ms: summarize(prefills), ttft_minus_prefill_ms: summarize(diffs) }
    ctx.log(`idle TTFT p50 ${median(ttfts).toFixed(2)} ms, prefill step p50 ${median(prefills).toFixed(2)} ms → TTFT − prefill p50 ${median(diffs).toFixed(2)} ms`)

    // Full load: twice MAX_BATCH streams, closed loop, both dialects; the probe histogram and a /healthz probe.
    const concurrency = 64
    const durationMs = ctx.quick ? 6000 : 30_000
    const bodies: Record<string, Uint8Array> = {
      'openai-chat': buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: NEW_TOKENS, stream: true, ignoreEos: true }),
      'anthropic-messages': buildBody('anthropic-messages', { model: node.model, text: prompt.text, maxTokens: NEW_TOKENS, stream: true, ignoreEos: true }),
    }
    ctx.log(`full load: ${concurrency} concurrent streams (OpenAI chat and Anthropic messages) for ${durationMs / 1000} s`)
    await node.eld!.reset()
    const probeLatencies: number[] = []
    let probing = true
    const probe = (async () => {
      while (probing) {
        const t0 = performance.now()
        try {
          const res = await fetch(`${node.url}/healthz`, { signal: AbortSignal.timeout(5000) })
          await res.arrayBuffer()
          probeLatencies.push(performance.now() - t0)
        } catch { /* counted by absence */ }
        await sleep(25)
      }
    })()
    const load = await closedLoop<RequestRecord>({
      concurrency,
      durationMs,
      graceMs: 3000,
      run: (i, signal) => {
        const dialect: BenchDialect = i % 2 === 0 ? 'openai-chat' : 'anthropic-messages'
        return send(bodies[dialect], dialect, signal)
      },
    })
    const eld = await node.eld!.read()
    probing = false
    await probe
    const recs = load.results
    const ok = recs.filter((r) => r.status === 200 && !r.error && !r.cutOff)
    const tokens = recs.reduce((s, r) => s + r.tokens, 0)
    raw.full_load = {
      concurrency,
      duration_ms: durationMs,
      requests: recs.length,
      completed: ok.length,
      errors: recs.filter((r) => r.error).length,
      cut_off: recs.filter((r) => r.cutOff).length,
      client_tokens_per_s: round((tokens * 1000) / load.endedAtMs),
      ttft_ms: summarize(ok.map((r) => r.ttftMs!).filter((x) => x !== undefined)),
      inter_token_ms: summarize(ok.flatMap((r) => r.gapsMs)),
      event_loop_delay_ms: { resolution_ms: eld.resolutionMs, samples: eld.count, p50: round(eld.p50), p90: round(eld.p90), p99: round(eld.p99), max: round(eld.max) },
      healthz_probe_ms: summarize(probeLatencies),
    }
    ctx.log(`event-loop delay on the socket thread: p50 ${eld.p50.toFixed(2)} ms, p99 ${eld.p99.toFixed(2)} ms, max ${eld.max.toFixed(1)} ms; /healthz probe p99 ${percentile(probeLatencies, 99).toFixed(2)} ms; ${(tokens * 1000 / load.endedAtMs).toFixed(0)} tok/s`)
    notes.push('Event-loop delay: perf_hooks.monitorEventLoopDelay inside the GPU node process (preloaded by the benchmark, bench/probe/event-loop-delay.ts), reported as lateness of a 2 ms timer; a /healthz probe latency is reported beside it.')
    notes.push('Idle TTFT minus prefill: client TTFT (first content frame, max_tokens 1) minus the one step the node ran for it (zl_step_duration_seconds sum delta: the worker round trip of the prefill step).')
    return {
      idle_ttft_minus_prefill_ms: round(median(diffs)),
      event_loop_delay_p99_ms: round(eld.p99),
    }
  } finally {
    await agent.close()
    await node.stop()
  }
}
