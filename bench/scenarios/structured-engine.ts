/**
 * Structured output and `n` on the real engine, in process: product Engines built as the node
 * builds them (parseNodeConfig's defaults, loadModel and Engine as compose-engine.ts: MAX_BATCH
 * 32, PREFILL_CHUNK 128, the prefix cache on at PREFIX_CACHE_MB 256), each its own model worker
 * on the `small` preset, its steps timed (engine-rig.ts's TimedRunner). Ratios within one run,
 * over rounds, median ratio.
 *
 * - `structured.json_schema_over_free_tokens_per_s`: 32 rows at once (32-token prompts, greedy),
 *   every row constrained by a bounded object schema (a string with maxLength, an enum, a bounded
 *   integer, a boolean; all required, additionalProperties false), ÷ the same 32 rows free.
 *   A constrained row ends where its grammar does, so the free rows are given the same length
 *   row by row: a warm-up constrained run (same prompts, greedy: the same answers every run)
 *   gives each row's answer length L, and its free row samples L + 1 tokens (ignore EOS), as many
 *   as the constrained row sampled with the end-of-text its grammar forces. Both runs then have
 *   the same batch, step by step, and differ only in the grammar's work (mask + accept per row,
 *   the constrained rows' sampling path). Two identical engines run the two at once, taking turns
 *   one step each (bench/lib/turns.ts, as prefix-zero-hit.ts: one A/B after the other drifted
 *   0.89–1.22 per round here); tokens/s = tokens sampled ÷ the time the engine held its turns,
 *   and which engine is constrained, and which is given its rows first, alternate by round.
 * - `structured.n4_over_n1_time`: one request with n = 4 ÷ one with n = 1, wall time until every
 *   choice finished, 32 new tokens (ignore EOS), the same 120-token prompt, sampled (temperature 1,
 *   seeded), on one engine alone, order alternating by round. `n` is the node's route
 *   (generate-route.ts choiceRequests): the first choice as asked, the others with `after` its id
 *   and seed + i, so they join once its prompt has and take its KV from the prefix cache —
 *   reproduced here request for request.
 *
 * Every run has its own cache salt: no run reuses another's cached prompt (a choice still reuses
 * its first choice's, whose salt it shares).
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { Engine } from '../../gpu-node/src/engine/engine.ts'
import { GREEDY, type EngineRequest } from '../../gpu-node/src/engine/types.ts'
import type { LoadedModel } from '../../gpu-node/src/model/load-model.ts'
import type { OutputConstraint } from '../../shared/src/generation.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round, summarize } from '../lib/stats.ts'
import { Turns, type TurnRunner } from '../lib/turns.ts'
import { loadNodeModel, promptFor, rotate, submitRequest, TimedRunner, type JobResult, type StepRecord } from './engine-rig.ts'

const ROWS = 32
/** A safety cap for the constrained rows; a bounded schema's answer ends far below it. */
const CONSTRAINED_CAP = 256
const N = 4
const N_PROMPT_TOKENS = 120
const N_NEW_TOKENS = 32

/** A bounded response schema: its compact answer completes in tens of tokens. */
const SCHEMA = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 16 },
    unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 14 },
    urgent: { type: 'boolean' },
  },
  required: ['city', 'unit', 'days', 'urgent'],
  additionalProperties: false,
}
const CONSTRAINT: OutputConstraint = { kind: 'json_schema', schema: JSON.stringify(SCHEMA) }

interface NodeEngine {
  engine: Engine
  model: LoadedModel
  timed: TimedRunner
  /** Its turns at the machine, when it runs beside another engine. */
  turn: TurnRunner
}

interface Run {
  wallMs: number
  /** The time this engine held its turns (measured runs side by side). */
  busyMs: number
  /** Tokens sampled: generated tokens, plus the end-of-text a constrained row's grammar ended with. */
  sampled: number
  steps: StepRecord[]
  jobs: JobResult[]
}

let runIndex = 0

/** The node's engine on `modelDir` (its default config; as compose-engine.ts builds it), its runner's steps timed, taking `turns`. */
async function startNodeEngine(modelDir: string, turns: Turns): Promise<NodeEngine> {
  const ep = process.env.EXECUTION_PROVIDER
  const { model, limits } = await loadNodeModel(modelDir, ep ? { EXECUTION_PROVIDER: ep } : {})
  const timed = new TimedRunner(model.runner)
  const turn = turns.runner(timed)
  const engine = new Engine({ runner: turn, modelKey: model.encoder.modelId, decoder: model.tokenizer, limits })
  return { engine, model, timed, turn }
}

/** Submits `reqs` in one tick; resolves when all have finished. */
async function runAll(e: NodeEngine, reqs: EngineRequest[], keepText = false): Promise<Run> {
  return (await runSideBySide([{ e, reqs, keepText }], false))[0]!
}

/**
 * Each engine's requests submitted in one tick, in the order given (the first takes the first
 * turn); with `measure`, each engine keeps its turns through its own work until its last finish.
 */
async function runSideBySide(runs: Array<{ e: NodeEngine; reqs: EngineRequest[]; keepText?: boolean }>, measure: boolean): Promise<Run[]> {
  const out = await Promise.all(
    runs.map(async ({ e, reqs, keepText }) => {
      const from = e.timed.steps.length
      const busy = e.turn.busyMs
      e.turn.measuring = measure
      const t0 = performance.now()
      let left = reqs.length
      const jobs = await Promise.all(
        reqs.map(async (req) => {
          const job = await submitRequest(e.engine, req, { keepText: keepText === true })
          if (--left === 0) e.turn.stopMeasuring()
          return job
        }),
      )
      const rejected = jobs.filter((j) => j.rejected).length
      if (rejected > 0) throw new Error(`${rejected} of ${reqs.length} requests refused`)
      const wallMs = Math.max(...jobs.map((j) => j.finishedAt!)) - t0
      const sampled = jobs.reduce((n, j, i) => n + j.tokens + (reqs[i]!.constraint && j.reason === 'stop' ? 1 : 0), 0)
      return { wallMs, busyMs: e.turn.busyMs - busy, sampled, steps: e.timed.steps.slice(from), jobs }
    }),
  )
  // Let the release-only ticks run before anything else is measured.
  await sleep(20)
  return out
}

function rowRequests(vocab: number, eos: number[], lengths: number[] | undefined, constrained: boolean, rows = ROWS): EngineRequest[] {
  const salt = `structured-${runIndex++}`
  return Array.from({ length: rows }, (_, i): EngineRequest => {
    const base = { id: `${salt}-${i}`, promptTokens: promptFor(i, vocab, eos), stop: [], sampling: GREEDY, priority: 0, cacheSalt: salt }
    return constrained ? { ...base, maxTokens: CONSTRAINED_CAP, constraint: CONSTRAINT } : { ...base, maxTokens: lengths![i]! + 1, ignoreEos: true }
  })
}

/** Whether a constrained answer is a document of SCHEMA (the grammar's job; checked, not assumed). */
function matchesSchema(text: string): boolean {
  try {
    const v = JSON.parse(text) as Record<string, unknown>
    return (
      Object.keys(v).length === 4 &&
      typeof v.city === 'string' && v.city.length >= 1 && v.city.length <= 16 &&
      (v.unit === 'celsius' || v.unit === 'fahrenheit') &&
      Number.isInteger(v.days) && (v.days as number) >= 1 && (v.days as number) <= 14 &&
      typeof v.urgent === 'boolean'
    )
  } catch {
    return false
  }
}

/**
 * The request of `n` choices as the node's route submits it (generate-route.ts choiceRequests):
 * the first as asked, each other `after` it with seed + i.
 */
function choiceRequests(first: EngineRequest, n: number): EngineRequest[] {
  const reqs = [first]
  for (let i = 1; i < n; i++) {
    const seed = first.sampling.seed
    const sampling = seed === undefined ? first.sampling : { ...first.sampling, seed: (seed + i) % 2 ** 32 }
    reqs.push({ ...first, id: `${first.id}.${i}`, sampling, after: first.id })
  }
  return reqs
}

function nRequest(prompt: number[], n: number): EngineRequest[] {
  const run = runIndex++
  const salt = `structured-n-${run}`
  return choiceRequests({ id: salt, promptTokens: prompt, maxTokens: N_NEW_TOKENS, stop: [], sampling: { ...GREEDY, temperature: 1, seed: 1000 + run }, priority: 0, ignoreEos: true, cacheSalt: salt }, n)
}

const stepMs = (s: StepRecord) => s.returnAt - s.callAt
const decodeOnly = (steps: StepRecord[], rows: number) => steps.filter((s) => s.prefillParts === 0 && s.decodeRows === rows).map(stepMs)

export async function runStructuredEngine(ctx: BenchContext, modelDir: string): Promise<{ figures: Record<string, number>; raw: Record<string, unknown>; notes: string[] }> {
  ctx.log(`loading ${modelDir} into two engines built as the node builds them (the node's default limits, prefix cache on), each its own model worker`)
  const turns = new Turns()
  // Built one after the other: loading is not what is measured.
  const x = await startNodeEngine(modelDir, turns)
  const y = await startNodeEngine(modelDir, turns)
  try {
    const schema = await jsonSchemaOverFree(ctx, [x, y])
    const n = await nOverOne(ctx, x, modelDir)
    return {
      figures: { json_schema_over_free_tokens_per_s: round(schema.ratio, 3), n4_over_n1_time: round(n.ratio, 3) },
      raw: { json_schema_over_free: schema.raw, n4_over_n1: n.raw },
      notes: [
        `json_schema_over_free: ${ROWS} rows at once, the free rows as long as the constrained rows row by row (answer + its end-of-text), tokens sampled per second of the time each engine held its turns (two identical engines side by side, one step each in turn, roles swapped by round).`,
        `n4_over_n1: wall time; the node's n (the other choices \`after\` the first: forked from its prefill) reproduced on the in-process engine, ${N_PROMPT_TOKENS}-token prompt, ${N_NEW_TOKENS} new tokens.`,
      ],
    }
  } finally {
    await Promise.all([x.engine.close().catch(() => {}), y.engine.close().catch(() => {})])
  }
}

async function jsonSchemaOverFree(ctx: BenchContext, pair: [NodeEngine, NodeEngine]) {
  const { vocabSize: vocab, eosTokenIds: eos } = pair[0].timed.info
  const rows = (lengths: number[] | undefined, constrained: boolean, n = ROWS) => rowRequests(vocab, eos, lengths, constrained, n)
  const t = performance.now()
  await pair[0].engine.prepare(CONSTRAINT)
  const compileMs = performance.now() - t
  await pair[1].engine.prepare(CONSTRAINT)
  // Warm-up, each engine: a small batch of each kind, then a constrained run of every row, whose answers give the free rows their lengths.
  for (const e of pair) {
    await runAll(e, rows(undefined, true, 4))
    await runAll(e, rows(Array(4).fill(8), false, 4))
  }
  const firsts = await Promise.all(pair.map((e) => runAll(e, rows(undefined, true), true)))
  const lengths = firsts[0]!.jobs.map((j) => j.tokens)
  const capped = firsts.flatMap((f) => f.jobs).filter((j) => j.reason !== 'stop').length
  if (capped > 0) throw new Error(`${capped} constrained rows did not end with their grammar within ${CONSTRAINED_CAP} tokens`)
  const sameAnswers = firsts[0]!.jobs.every((j, i) => j.text === firsts[1]!.jobs[i]!.text)
  ctx.log(`json_schema vs free: schema compiled in ${round(compileMs, 0)} ms; ${ROWS} constrained answers of ${median(lengths)} tokens median (${Math.min(...lengths)}–${Math.max(...lengths)}), the same on both engines: ${sameAnswers}; e.g. ${firsts[0]!.jobs[0]!.text}`)

  const rounds = ctx.quick ? 4 : 8
  const perRound: Array<Record<string, number>> = []
  let valid = 0
  let answers = 0
  for (let r = 0; r < rounds; r++) {
    // Which engine is constrained alternates every round, which is given its rows first every two.
    const [c, f] = r % 2 === 0 ? pair : [pair[1], pair[0]]
    const both = [
      { e: c, reqs: rows(undefined, true), keepText: true },
      { e: f, reqs: rows(lengths, false) },
    ]
    // A cached constraint's prepare is a worker round trip, as the route awaits it before submitting.
    await c.engine.prepare(CONSTRAINT)
    const ordered = Math.floor(r / 2) % 2 === 0 ? both : [both[1]!, both[0]!]
    const done = await runSideBySide(ordered, true)
    const [cr, fr] = Math.floor(r / 2) % 2 === 0 ? done : [done[1]!, done[0]!]
    answers += cr!.jobs.length
    valid += cr!.jobs.filter((j) => matchesSchema(j.text!)).length
    const row: Record<string, number> = { constrained_engine: r % 2, constrained_first: Math.floor(r / 2) % 2 === 0 ? 1 : 0 }
    for (const [what, run] of [['json_schema', cr!], ['free', fr!]] as const) {
      row[`${what}_tok_s`] = (run.sampled * 1000) / run.busyMs
      row[`${what}_tokens`] = run.sampled
      row[`${what}_busy_ms`] = run.busyMs
      row[`${what}_steps`] = run.steps.length
      row[`${what}_decode_step_ms_p50`] = median(run.steps.filter((s) => s.prefillParts === 0).map(stepMs))
      // The busy time's parts: the runner's steps (prefill ticks apart), and the rest (the engine's own work, the worker hand-offs).
      row[`${what}_steps_ms`] = run.steps.reduce((m, s) => m + stepMs(s), 0)
      row[`${what}_prefill_ticks_ms`] = run.steps.filter((s) => s.prefillParts > 0).reduce((m, s) => m + stepMs(s), 0)
    }
    row.ratio = row.json_schema_tok_s / row.free_tok_s
    ctx.log(`json_schema vs free, round ${r + 1}/${rounds}: ${round(row.json_schema_tok_s, 0)} vs ${round(row.free_tok_s, 0)} tok/s (${row.json_schema_tokens} vs ${row.free_tokens} tokens, ${row.json_schema_steps} vs ${row.free_steps} steps; decode step p50 ${round(row.json_schema_decode_step_ms_p50, 1)} vs ${round(row.free_decode_step_ms_p50, 1)} ms; steps ${round(row.json_schema_steps_ms, 0)} vs ${round(row.free_steps_ms, 0)} ms of busy ${round(row.json_schema_busy_ms, 0)} vs ${round(row.free_busy_ms, 0)}, prefill ticks ${round(row.json_schema_prefill_ticks_ms, 0)} vs ${round(row.free_prefill_ticks_ms, 0)}) → ${round(row.ratio, 3)}`)
    perRound.push(row)
  }
  const ratio = median(perRound.map((x) => x.ratio))
  ctx.log(`json_schema / free tokens/s: median ${round(ratio, 3)} over ${rounds} rounds; answers matching the schema: ${valid}/${answers}`)
  if (valid !== answers) throw new Error(`${answers - valid} of ${answers} constrained answers do not match the schema`)
  return {
    ratio,
    raw: {
      rows: ROWS,
      schema: SCHEMA,
      compile_ms: round(compileMs, 1),
      answer_tokens: summarize(lengths),
      example_answer: firsts[0]!.jobs[0]!.text,
      answers_same_on_both_engines: sameAnswers,
      answers_matching_schema: `${valid}/${answers}`,
      rounds: perRound.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, round(v)]))),
      json_schema_tok_s: round(median(perRound.map((x) => x.json_schema_tok_s)), 1),
      free_tok_s: round(median(perRound.map((x) => x.free_tok_s)), 1),
    },
  }
}

async function nOverOne(ctx: BenchContext, e: NodeEngine, modelDir: string) {
  const prompt = e.model.encoder.encodeText(textPromptOfLength(modelDir, N_PROMPT_TOKENS).text)
  // Warm-up: one of each.
  await runAll(e, nRequest(prompt, 1))
  await runAll(e, nRequest(prompt, N))
  const rounds = ctx.quick ? 7 : 15
  const rows: Array<Record<string, number>> = []
  const stepsOf: Record<'n1' | 'n4', StepRecord[]> = { n1: [], n4: [] }
  const followers = { firstTextAfterLeaderMs: [] as number[], cachedTokens: [] as number[] }
  for (let r = 0; r < rounds; r++) {
    const row: Record<string, number> = {}
    for (const what of rotate(['n1', 'n4'] as const, r)) {
      const run = await runAll(e, nRequest(prompt, what === 'n4' ? N : 1))
      const tokens = run.jobs.reduce((s, j) => s + j.tokens, 0)
      if (tokens !== N_NEW_TOKENS * run.jobs.length) throw new Error(`${what}: ${tokens} tokens, expected ${N_NEW_TOKENS * run.jobs.length}`)
      row[`${what}_wall_ms`] = run.wallMs
      row[`${what}_steps`] = run.steps.length
      stepsOf[what].push(...run.steps)
      if (what === 'n4') {
        const [leader, ...rest] = run.jobs
        for (const j of rest) {
          followers.firstTextAfterLeaderMs.push(j.firstTextAt! - leader!.firstTextAt!)
          followers.cachedTokens.push(j.cachedTokens ?? 0)
        }
      }
    }
    row.ratio = row.n4_wall_ms / row.n1_wall_ms
    ctx.log(`n=${N} vs n=1, round ${r + 1}/${rounds}: ${round(row.n4_wall_ms, 1)} vs ${round(row.n1_wall_ms, 1)} ms (${row.n4_steps} vs ${row.n1_steps} steps) → ${round(row.ratio, 3)}`)
    rows.push(row)
  }
  const ratio = median(rows.map((x) => x.ratio))
  // Where n = 4's time goes: its first choice's prefill, the tick the others join in (the first
  // choice's decode row, then each other's last partial block, its own B=1 run continuing the
  // cached prefix, and its join to the batch), and decode steps of 4 rows against 1.
  const joinTicks = stepsOf.n4.filter((s) => s.prefillParts === N - 1)
  const p50 = (xs: number[]) => round(median(xs), 2)
  const where = {
    prompt_tokens: prompt.length,
    n1_wall_ms_p50: round(median(rows.map((x) => x.n1_wall_ms)), 1),
    n4_wall_ms_p50: round(median(rows.map((x) => x.n4_wall_ms)), 1),
    n1_steps_p50: median(rows.map((x) => x.n1_steps)),
    n4_steps_p50: median(rows.map((x) => x.n4_steps)),
    prefill_step_ms_p50: p50(stepsOf.n1.filter((s) => s.prefillParts === 1 && s.decodeRows === 0).map(stepMs)),
    join_step_ms_p50: p50(joinTicks.map(stepMs)),
    join_step_decode_ms_p50: p50(joinTicks.map((s) => s.decodeMs)),
    join_step_prefill_ms_p50: p50(joinTicks.map((s) => s.prefillMs)),
    decode_step_ms_p50_1_row: p50(decodeOnly(stepsOf.n1, 1)),
    decode_step_ms_p50_4_rows: p50(decodeOnly(stepsOf.n4, N)),
    followers_first_text_after_first_choice_ms_p50: p50(followers.firstTextAfterLeaderMs),
    followers_cached_tokens_p50: median(followers.cachedTokens),
    /**
     * The ratio from the median steps, steadier than wall times on a shared machine: n = 1 is the
     * prompt's prefill and 31 decode steps of 1 row; n = 4 the same prefill, the others' join tick
     * and 31 decode steps of 4 rows (the last of 3).
     */
    n4_over_n1_from_step_medians: 0,
  }
  where.n4_over_n1_from_step_medians = round((where.prefill_step_ms_p50 + where.join_step_ms_p50 + (N_NEW_TOKENS - 1) * where.decode_step_ms_p50_4_rows) / (where.prefill_step_ms_p50 + (N_NEW_TOKENS - 1) * where.decode_step_ms_p50_1_row), 3)
  ctx.log(`n=${N} / n=1 time: median ${round(ratio, 3)} over ${rounds} rounds; steps ${where.n4_steps_p50} vs ${where.n1_steps_p50}; prompt prefill ${where.prefill_step_ms_p50} ms; the others' join tick ${where.join_step_ms_p50} ms (decode ${where.join_step_decode_ms_p50}, their ${N - 1} prefills + joins ${where.join_step_prefill_ms_p50}); decode ${where.decode_step_ms_p50_4_rows} ms at ${N} rows vs ${where.decode_step_ms_p50_1_row} at 1; the others' first text ${where.followers_first_text_after_first_choice_ms_p50} ms after the first's, ${where.followers_cached_tokens_p50} prompt tokens cached; from the median steps ${where.n4_over_n1_from_step_medians}`)
  return { ratio, raw: { ...where, rounds: rows.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, round(v)]))) } }
}
