/**
 * Real-time completion (`--only realtime`): what an editor, a chat UI and a mixed fleet feel.
 * Each part runs its own GPU node process, direct (no edge), 127.0.0.1 only.
 *
 * - typing (the trained default model): 16 typists open their files (a completion each, all at
 *   once, awaited), then each sends a streaming completion every 150 ms for 5 s (2 s quick), each
 *   under its own x-zl-supersede key, the prompt one keystroke longer each time. Keys: the model steps a superseded request still ran after its successor
 *   arrived (the node's zl_abort_free_steps: a step is one token per row), and the p99 TTFT of
 *   the requests that got a first token ÷ the idle TTFT of the same kind of request.
 * - priority (the same model, a fresh node): batch traffic at twice the node's batch (2 ×
 *   MAX_BATCH closed-loop clients, x-zl-priority 1000: direct, the node takes the edge's number)
 *   while one interactive client, in a process of its own, asks 100 ms after each answer; its
 *   p99 TTFT ÷ idle, with BATCH_ROWS_BESIDE_INTERACTIVE at half the batch. Requests of the same
 *   kind sent as batch ones, beside, show what priority changes; the same part on another fresh
 *   node without the limit, what the limit buys and what it costs the batch.
 * - warm turns (small preset, as the issue measured): conversations of 6 turns over a ~900-token
 *   system prompt, one at a time (4, quick 2), prefix cache on; each warm turn's TTFT ÷ the TTFT
 *   of a fresh request made of just its uncached tokens (usage's cached_tokens tells how many),
 *   sequential; the median over every warm turn.
 * - speculation (the trained default model; realtime-spec.ts): speculative decoding auto ÷ off.
 */
import { spawn } from 'node:child_process'
import { DEFAULT_MODEL_DIR } from '../../gpu-node/src/config.ts'
import { CLASS_PRIORITY } from '../../shared/src/priority.ts'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import type { Dispatcher } from 'undici'
import { benchAgent, sendRequest, streamCompletion, type RequestRecord } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { chatPromptOfLength, textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { startGpuNode, type GpuNode } from '../lib/services.ts'
import { runSpeculation } from './realtime-spec.ts'
import { median, percentile, round } from '../lib/stats.ts'

const TYPISTS = 16
const KEYSTROKE_MS = 150
const COMPLETION_TOKENS = 32
/** The typists' files before their growing last line, and the priority probe's prompt, in tokens. */
const TYPING_PROMPT = 160
const PROBE_PROMPT = 48
const PROBE_TOKENS = 8
/**
 * The priority probe asks this long after its last answer: ~110 requests in a full run (an
 * answer of 8 tokens beside 16 batch rows takes ~140 ms), so its p99 is not its maximum.
 */
const PROBE_INTERVAL_MS = 100
const BATCH_CAP = 16
/** BATCH_ROWS_BESIDE_INTERACTIVE: half the batch for batch-class rows while interactive requests come. */
const BATCH_ROWS = BATCH_CAP / 2
const NODE_ENV = { MAX_BATCH: String(BATCH_CAP), MAX_QUEUE: '256' }
const WARM_MODEL = 'models/small'
type ChatMessage = { role: 'system' | 'user' | 'assistant'; content: string }
/** Conversations of the warm-turn part, one at a time: each gives 5 warm turns (a fresh request each beside). */
const WARM_CONVERSATIONS = (quick: boolean) => (quick ? 2 : 4)
/** The wire header as the edge would send it for a batch key (the node takes numbers only). */
const BATCH = { 'x-zl-priority': String(CLASS_PRIORITY.batch) }

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export async function runRealtime(ctx: BenchContext): Promise<SectionResult> {
  const notes: string[] = []
  const raw: Record<string, unknown> = {}
  const node = await startGpuNode({ modelDir: DEFAULT_MODEL_DIR, env: NODE_ENV })
  let typing: { steps: number | null; p99OverIdle: number | null }
  try {
    // Idle: the same kind of request alone on the idle node, as the part sends it.
    const idle = await idleTtft(node, TYPING_PROMPT, COMPLETION_TOKENS, ctx.quick ? 4 : 10)
    raw.idle_ttft_ms = { typing: round(idle, 2) }
    ctx.log(`idle TTFT (${DEFAULT_MODEL_DIR}, stream): ${TYPING_PROMPT}-token prompt ${round(idle, 1)} ms`)
    typing = await runTyping(ctx, node, idle, raw)
  } finally {
    await node.stop()
  }
  // Priority on a fresh node with the batch-rows limit (the key), then on another without it:
  // what the limit buys and costs. Fresh nodes both, so neither inherits the typing part's state.
  const limited = await priorityOnFreshNode(ctx, BATCH_ROWS)
  raw.priority = limited.raw
  const unlimited = await priorityOnFreshNode(ctx, 0)
  raw.priority_without_batch_rows_limit = unlimited.raw
  const priority = limited.ratio
  const warm = await runWarmTurns(ctx, raw)
  const spec = await runSpeculation(ctx, raw)
  notes.push(`realtime: typing and priority on ${DEFAULT_MODEL_DIR} (MAX_BATCH ${BATCH_CAP}), warm turns on ${WARM_MODEL}; a fresh GPU node each, direct, 2 intra-op threads (the node's default)`)
  return {
    figures: {
      superseded_tokens_after_successor: typing.steps,
      typing_p99_ttft_over_idle: typing.p99OverIdle,
      interactive_p99_ttft_under_2x_overload_over_idle: priority,
      warm_turn_ttft_over_suffix_prefill: warm,
      ...spec,
    },
    raw,
    notes,
  }
}

const completion = (node: GpuNode, text: string, maxTokens: number, headers: Record<string, string>, agent: Dispatcher) =>
  streamCompletion(node.url, node.model, text, maxTokens, { headers, dispatcher: agent })

/**
 * Requests of a kind a fresh node answers before its idle TTFT is taken: the first run its code
 * cold (JIT, a new connection, first shapes). Measured on two fresh nodes: the median TTFT of
 * the 2nd–11th requests after start was 12–13 % above that of the eleven after them.
 */
const IDLE_WARMUP = 5

async function idleTtft(node: GpuNode, promptTokens: number, maxTokens: number, n: number): Promise<number> {
  const agent = benchAgent()
  const ttfts: number[] = []
  for (let i = 0; i < IDLE_WARMUP + n; i++) {
    const r = await completion(node, textPromptOfLength(DEFAULT_MODEL_DIR, promptTokens, 300 + i).text, maxTokens, {}, agent)
    if (i >= IDLE_WARMUP) ttfts.push(r.ttftMs!)
  }
  await agent.close()
  return median(ttfts)
}

async function nodeMetrics(node: GpuNode) {
  const samples = parseProm(await node.metricsText())
  return { freedSteps: promValue(samples, 'zl_abort_free_steps_sum'), freed: promValue(samples, 'zl_abort_free_steps_count'), superseded: promValue(samples, 'zl_request_failure_total', { reason: 'superseded' }) }
}

async function runTyping(ctx: BenchContext, node: GpuNode, idle: number, raw: Record<string, unknown>) {
  const durationMs = ctx.quick ? 2000 : 5000
  const agent = benchAgent()
  const records: RequestRecord[] = []
  const base = Array.from({ length: TYPISTS }, (_, t) => textPromptOfLength(DEFAULT_MODEL_DIR, TYPING_PROMPT, 100 + t).text)
  // Each editor opens its file first (a completion of it, to its end), all at once: 16 cold
  // prompts in one burst are the engine section's c16 case, not a keystroke; their TTFTs are in raw.
  const opened = await Promise.all(base.map((prompt, t) => completion(node, prompt, COMPLETION_TOKENS, { 'x-zl-supersede': `typist-${t}` }, agent)))
  const opens = opened.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs]))
  const before = await nodeMetrics(node)
  const started = performance.now()
  await Promise.all(
    base.map(async (prompt, t) => {
      const inFlight: Array<Promise<void>> = []
      for (let k = 0; performance.now() - started < durationMs; k++) {
        // One keystroke more each time: the prompt grows by a character.
        const text = `${prompt}\ndef f${t}(${'x'.repeat(k)}`
        inFlight.push(completion(node, text, COMPLETION_TOKENS, { 'x-zl-supersede': `typist-${t}` }, agent).then((r) => void records.push(r)))
        await sleep(KEYSTROKE_MS)
      }
      await Promise.all(inFlight)
    }),
  )
  await agent.close()
  const after = await nodeMetrics(node)
  const superseded = after.superseded - before.superseded
  const freed = after.freed - before.freed
  const steps = freed > 0 ? (after.freedSteps - before.freedSteps) / freed : null
  const firsts = records.filter((r) => r.ttftMs !== undefined).map((r) => r.ttftMs!)
  const p99 = firsts.length > 0 ? percentile(firsts, 99) : null
  raw.typing = { typists: TYPISTS, keystroke_ms: KEYSTROKE_MS, duration_ms: durationMs, requests: records.length, superseded, with_first_token: firsts.length, ttft_ms: { p50: round(median(firsts), 2), p99: p99 === null ? null : round(p99, 2) }, open_ttft_ms: { p50: round(median(opens), 2), max: round(Math.max(...opens), 2) }, steps_after_successor_mean: steps === null ? null : round(steps, 3) }
  ctx.log(`typing: ${records.length} requests, ${superseded} superseded; steps run after the successor arrived, mean ${steps === null ? '–' : round(steps, 2)}; TTFT p99 ${p99 === null ? '–' : round(p99, 1)} ms`)
  return { steps: steps === null ? null : round(steps), p99OverIdle: p99 === null ? null : round(p99 / idle) }
}

async function priorityOnFreshNode(ctx: BenchContext, limit: number): Promise<{ ratio: number | null; raw: Record<string, unknown> }> {
  const node = await startGpuNode({ modelDir: DEFAULT_MODEL_DIR, env: { ...NODE_ENV, ...(limit > 0 ? { BATCH_ROWS_BESIDE_INTERACTIVE: String(limit) } : {}) } })
  try {
    const idle = await idleTtft(node, PROBE_PROMPT, PROBE_TOKENS, ctx.quick ? 4 : 10)
    ctx.log(`idle TTFT (${DEFAULT_MODEL_DIR}, stream): ${PROBE_PROMPT}-token prompt ${round(idle, 1)} ms`)
    const { ratio, raw } = await runPriority(ctx, node, idle, limit)
    return { ratio, raw: { ...raw, idle_ttft_ms: round(idle, 2), p99_over_idle: ratio } }
  } finally {
    await node.stop()
  }
}

async function runPriority(ctx: BenchContext, node: GpuNode, idle: number, limit: number): Promise<{ ratio: number | null; raw: Record<string, unknown> }> {
  const durationMs = ctx.quick ? 8000 : 25_000
  // Every prompt is made before the load starts (a search costs CPU on the node's cores), and
  // each is its own: a repeated one would continue the prefix cache's blocks, which idle's do not.
  const prompts = (first: number, n: number) => Array.from({ length: n }, (_, i) => textPromptOfLength(DEFAULT_MODEL_DIR, PROBE_PROMPT, first + i).text)
  const asked = { interactive: prompts(700, Math.ceil(durationMs / PROBE_INTERVAL_MS) + 1), asBatch: prompts(5000, Math.ceil(durationMs / 1000) + 1) }
  const batchTexts = Array.from({ length: 8 }, (_, i) => textPromptOfLength(DEFAULT_MODEL_DIR, 96, 500 + i).text)
  // Two probes side by side, each in its own process (rig/ttft-probe.ts says why), started before
  // the load, asking PROBE_INTERVAL_MS after each answer: one interactive, one sending its
  // requests as batch (queued behind the batch load, a second or more each: fewer prompts).
  const args = (priority?: string) => [node.url, node.model, PROBE_TOKENS, durationMs, PROBE_INTERVAL_MS, ...(priority ? [priority] : [])]
  const probes = await startProbes([
    { args: args(), texts: asked.interactive },
    { args: args(BATCH['x-zl-priority']), texts: asked.asBatch },
  ])
  const agent = benchAgent()
  let stop = false
  // Batch tokens answered while the probes ask: what the batch-rows limit costs the batch.
  const window = { startMs: Infinity, endMs: Infinity, tokens: 0 }
  // Twice the batch cap, closed loop: as many batch requests queued as running, all the time.
  const batchers = Array.from({ length: 2 * BATCH_CAP }, async (_, i) => {
    for (let n = 0; !stop; n++) {
      const r = await completion(node, batchTexts[(i + n) % batchTexts.length]!, 64, BATCH, agent)
      if (r.startMs >= window.startMs && r.startMs + r.totalMs <= window.endMs) window.tokens += r.tokens
    }
  })
  await sleep(1000)
  window.startMs = performance.now()
  const [interactive, asBatch] = await probes.go()
  window.endMs = performance.now()
  stop = true
  await Promise.all(batchers)
  await agent.close()
  const p99 = (xs: number[]) => (xs.length > 0 ? round(percentile(xs, 99), 2) : null)
  const batchTokensPerS = round((window.tokens * 1000) / (window.endMs - window.startMs), 1)
  const raw = {
    batch_clients: 2 * BATCH_CAP,
    max_batch: BATCH_CAP,
    batch_rows_beside_interactive: limit,
    probe_interval_ms: PROBE_INTERVAL_MS,
    interactive_requests: interactive.length,
    interactive_ttft_ms: { p50: round(median(interactive), 2), p90: round(percentile(interactive, 90), 2), p99: p99(interactive), max: round(Math.max(...interactive), 2) },
    as_batch_requests: asBatch.length,
    same_requests_as_batch_ttft_ms_p99: p99(asBatch),
    batch_tokens_per_s: batchTokensPerS,
  }
  ctx.log(`priority (batch rows beside interactive: ${limit || 'no limit'}): under 2× batch load, interactive TTFT p50 ${raw.interactive_ttft_ms.p50} p99 ${p99(interactive)} ms (${interactive.length} requests); the same sent as batch ${p99(asBatch)} ms; batch ${batchTokensPerS} tok/s`)
  const p = p99(interactive)
  return { ratio: p === null ? null : round(p / idle), raw }
}

/**
 * Starts rig/ttft-probe.ts in processes of their own, one per probe, and resolves once every one
 * is ready (its start-up CPU spent); `go` then hands each its prompts on stdin and returns the
 * TTFTs each printed.
 */
async function startProbes(probes: Array<{ args: Array<string | number>; texts: string[] }>): Promise<{ go(): Promise<number[][]> }> {
  const started = probes.map(({ args }) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/rig/ttft-probe.ts', ...args.map(String)], { stdio: ['pipe', 'pipe', 'inherit'] })
    let out = ''
    let ready = () => {}
    const isReady = new Promise<void>((resolve) => (ready = resolve))
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString('utf8')
      if (out.startsWith('ready\n')) ready()
    })
    const done = new Promise<number[]>((resolve, reject) => {
      child.on('error', reject)
      child.on('exit', (code) => (code === 0 ? resolve((JSON.parse(out.trim().split('\n').at(-1)!) as { ttfts: number[] }).ttfts) : reject(new Error(`ttft probe exited ${code}`))))
    })
    // A probe that dies before it is ready fails the wait, not only `go`.
    return { child, isReady: Promise.race([isReady, done.then(() => {})]), done }
  })
  await Promise.all(started.map((p) => p.isReady))
  return {
    go() {
      started.forEach((p, i) => p.child.stdin.end(JSON.stringify(probes[i]!.texts)))
      return Promise.all(started.map((p) => p.done))
    },
  }
}

async function runWarmTurns(ctx: BenchContext, raw: Record<string, unknown>): Promise<number | null> {
  await ensureGeneratedModel(WARM_MODEL, (l) => ctx.log(l))
  const node = await startGpuNode({ modelDir: WARM_MODEL })
  const agent = benchAgent()
  const chat = (msgs: ChatMessage[]) =>
    sendRequest({ origin: node.url, dialect: 'openai-chat', body: buildBody('openai-chat', { model: node.model, text: '', messages: msgs, maxTokens: 24, stream: true, ignoreEos: true }), stream: true, dispatcher: agent, captureText: true })
  try {
    const ratios: number[] = []
    const turns: unknown[] = []
    // Conversations one after another, each over its own system prompt; every prompt (turns and
    // fresh ones) its own words, so a fresh request shares no block with anything before it.
    for (let c = 0; c < WARM_CONVERSATIONS(ctx.quick); c++) {
      const messages: ChatMessage[] = [{ role: 'system', content: chatPromptOfLength(WARM_MODEL, 900, 41 + c).text }]
      for (let turn = 1; turn <= 6; turn++) {
        messages.push({ role: 'user', content: chatPromptOfLength(WARM_MODEL, 40, 900 + 10 * c + turn).text })
        const r = await chat(messages)
        messages.push({ role: 'assistant', content: r.text ?? '' })
        if (turn === 1) continue
        const uncached = (r.promptTokens ?? 0) - (r.cachedTokens ?? 0)
        const fresh = await chat([{ role: 'user', content: chatPromptOfLength(WARM_MODEL, Math.max(1, uncached), 2000 + 10 * c + turn).text }])
        ratios.push(r.ttftMs! / fresh.ttftMs!)
        turns.push({ conversation: c, turn, prompt_tokens: r.promptTokens, cached_tokens: r.cachedTokens, warm_ttft_ms: round(r.ttftMs!, 2), fresh_suffix_ttft_ms: round(fresh.ttftMs!, 2), fresh_cached_tokens: fresh.cachedTokens ?? 0 })
      }
    }
    raw.warm_turns = turns
    ctx.log(`warm turns: TTFT ÷ a fresh prompt of the uncached tokens: ${ratios.map((x) => round(x, 2)).join(', ')}`)
    return ratios.length > 0 ? round(median(ratios)) : null
  } finally {
    await agent.close()
    await node.stop()
  }
}
