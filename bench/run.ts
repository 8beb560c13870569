/**
 * `npm run bench` — the benchmark suite (DESIGN.md §9).
 *
 *   npm run bench                      every section, full length (≈ 10–15 min on 2 cores)
 *   npm run bench -- --quick           every section, shortened (≈ 15 min: the edge section counts instructions under callgrind)
 *   npm run bench -- --only edge,cancel
 *   options: --engine-model DIR (default models/small), --edge-model DIR (default models/tiny)
 *
 * Sections: engine (bench/scenarios/engine.ts), edge, cancel, ratelimit, prefix, wan. Writes
 * bench/results/latest.json, latest.md, throughput-ttft.svg and the generated table in
 * docs/PERFORMANCE.md. Prints progress as it goes. Everything listens on 127.0.0.1 only; every
 * child process it starts is stopped when it ends, fails or is interrupted.
 *
 * The process re-executes itself once with the glibc malloc settings the engine needs
 * (DESIGN.md §7; they are read only at process start), exactly as the GPU node's launcher does.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { latestMarkdown, markdownTable, readLatest, rewriteDocsBlock, sectionRecord, SECTIONS, verdicts, writeFileEnsuringDir, type Latest, type SectionName } from './lib/report.ts'
import type { BenchContext, SectionResult } from './lib/report-types.ts'
import { ensureBenchTools } from './lib/bench-tools.ts'
import { killAllNow, machineLoad, MALLOC_ENV, stopAll } from './lib/procs.ts'
import { throughputTtftSvg } from './lib/svg-chart.ts'

if (process.env.MALLOC_MMAP_MAX_ !== MALLOC_ENV.MALLOC_MMAP_MAX_) {
  const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...process.argv.slice(2)], { stdio: 'inherit', env: { ...process.env, ...MALLOC_ENV } })
  // Signals are passed on; the child stops what it started, then exits (a repeat is the same stop).
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal))
  const code = await new Promise<number>((resolve) => child.on('exit', (c, signal) => resolve(c ?? (signal ? 130 : 1))))
  process.exit(code)
}

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    'engine-model': { type: 'string', default: 'models/small' },
    'edge-model': { type: 'string', default: 'models/tiny' },
    help: { type: 'boolean', default: false },
  },
})
if (values.help) {
  console.log('npm run bench [-- --quick] [--only engine,edge,cancel,ratelimit,prefix,wan,structured,realtime] [--engine-model DIR] [--edge-model DIR]')
  process.exit(0)
}
const quick = values.quick!
const only = values.only ? values.only.split(',').map((s) => s.trim()).filter(Boolean) : [...SECTIONS]
for (const s of only) {
  if (!(SECTIONS as readonly string[]).includes(s)) {
    console.error(`unknown section "${s}"; sections: ${SECTIONS.join(', ')}`)
    process.exit(2)
  }
}

const ROOT = join(import.meta.dirname, '..')
const RESULTS = join(ROOT, 'bench', 'results')
const LATEST_JSON = join(RESULTS, 'latest.json')
const t0 = performance.now()
const stamp = () => `${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s`

// Bounded in time as a whole: a stuck scenario cannot keep the machine busy.
// The edge section alone takes ~12 min quick: instruction counts under callgrind.
const HARD_LIMIT_MS = (quick ? 25 : 60) * 60_000
const watchdog = setTimeout(() => {
  console.error(`bench: over the ${HARD_LIMIT_MS / 60_000}-minute limit; stopping`)
  void stopAll().finally(() => process.exit(1))
}, HARD_LIMIT_MS)
watchdog.unref()
let interrupted = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) return
    interrupted = true
    console.error(`\nbench: ${signal}: stopping child processes`)
    void stopAll().finally(() => process.exit(130))
  })
}
process.on('exit', killAllNow)

async function runSection(name: SectionName, ctx: BenchContext): Promise<SectionResult> {
  switch (name) {
    case 'engine':
      return (await import('./scenarios/engine.ts')).runEngine(ctx, { modelDir: values['engine-model']! })
    case 'edge':
      return (await import('./scenarios/edge.ts')).runEdge(ctx, { modelDir: values['edge-model']! })
    case 'cancel':
      return (await import('./scenarios/cancel.ts')).runCancel(ctx, { modelDir: values['engine-model']! })
    case 'ratelimit':
      return (await import('./scenarios/ratelimit.ts')).runRatelimit(ctx)
    case 'prefix':
      return (await import('./scenarios/prefix.ts')).runPrefix(ctx, { modelDir: values['engine-model']! })
    case 'wan':
      return (await import('./scenarios/wan.ts')).runWan(ctx, { modelDir: values['edge-model']! })
    case 'structured':
      return (await import('./scenarios/structured.ts')).runStructured(ctx, { modelDir: values['engine-model']! })
    case 'realtime':
      return (await import('./scenarios/realtime.ts')).runRealtime(ctx)
  }
}

const previous = readLatest(LATEST_JSON)
const latest: Latest = { ...previous }
let failed = 0
console.log(`bench: ${quick ? 'quick' : 'full'} run of ${only.join(', ')}; load average ${machineLoad().load1.toFixed(2)} on ${machineLoad().cores} cores`)
// A fresh machine: redis-server and nginx-light installed as `npm start` installs redis-server (root), else the instruction.
try {
  ensureBenchTools(only as SectionName[], (line) => console.log(`bench: ${line}`))
} catch (e) {
  console.error(`bench: ${(e as Error).message}`)
  process.exit(1)
}
for (const name of only as SectionName[]) {
  const before = machineLoad()
  const started = performance.now()
  console.log(`[${stamp()}] ── ${name} ──`)
  const ctx: BenchContext = { quick, log: (msg) => console.log(`[${stamp()}] ${name}: ${msg}`) }
  let result: SectionResult
  let error: string | undefined
  try {
    result = await runSection(name, ctx)
  } catch (e) {
    failed++
    error = e instanceof Error ? e.message : String(e)
    console.error(`[${stamp()}] ${name}: FAILED: ${error}`)
    result = { figures: {}, raw: {}, notes: [] }
  } finally {
    await stopAll()
  }
  if (interrupted) break
  const after = machineLoad()
  latest[name] = sectionRecord(result, {
    measured_at: new Date().toISOString(),
    quick,
    machine: { load1_before: before.load1, load1_after: after.load1, cores: after.cores },
    duration_s: (performance.now() - started) / 1000,
    ...(error ? { error } : {}),
  })
  for (const [k, v] of Object.entries(result.figures)) console.log(`[${stamp()}] ${name}.${k} = ${v}`)
}

latest.generated_at = new Date().toISOString()
latest.targets = verdicts(latest).map((v) => ({ key: v.key, value: v.value ?? null, target: v.target, result: v.result }))
writeFileEnsuringDir(LATEST_JSON, JSON.stringify(latest, null, 2) + '\n')
writeFileEnsuringDir(join(RESULTS, 'latest.md'), latestMarkdown(latest))
const chart = latest.engine?.chart
if (chart && chart.length > 0) {
  const e = latest.engine!
  const model = String((e.raw as { model?: string }).model ?? 'models/small')
  writeFileEnsuringDir(join(RESULTS, 'throughput-ttft.svg'), throughputTtftSvg(chart, `${model}, 32-token prompts, 96 new tokens; ${e.quick ? 'quick' : 'full'} run ${e.measured_at.slice(0, 16).replace('T', ' ')} UTC`))
}
rewriteDocsBlock(join(ROOT, 'docs', 'PERFORMANCE.md'), latest)
console.log('')
console.log(markdownTable(latest))
console.log('')
console.log(`bench: wrote bench/results/latest.json, latest.md, throughput-ttft.svg and the table in docs/PERFORMANCE.md (${stamp().trim()})`)
process.exit(failed > 0 ? 1 : 0)
