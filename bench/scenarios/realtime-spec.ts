/**
 * Speculative decoding by prompt lookup (part of `--only realtime`), on the trained default
 * model: two GPU nodes, SPEC_DECODING=auto and off, each run in turn (never at once), direct,
 * 127.0.0.1 only, with the same requests.
 *
 * - edit, batch 1: one greedy request rewriting a code file it was given (this repository's own
 *   quantize.py, a name renamed in the lines it was shown); its decode rate (tokens after the
 *   first ÷ the time after the first) auto ÷ off. The raw figures say how much of the answer
 *   copies the renamed file: zl-code (16 M parameters) does not copy it; what speculation gains
 *   there is its drafts matching the answer's own repeated lines.
 * - no copy, batch 32: 32 requests at once, sampled (temperature 1, a seed each) from prompts of
 *   plain words, so their answers copy nothing, beside a pilot row (startPilot); the total tokens/s
 *   of the 32 auto ÷ off.
 * - exact: every text of both parts equal on the two nodes (greedy and seeded, batched): 1, else 0.
 * The auto node's spec_decode counters say how much it verified and accepted in each part.
 */
import { readFileSync } from 'node:fs'
import { DEFAULT_MODEL_DIR } from '../../gpu-node/src/config.ts'
import type { Dispatcher } from 'undici'
import { benchAgent, streamCompletion, type RequestRecord } from '../load/client.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { waitUntil } from '../lib/procs.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startGpuNode, type GpuNode } from '../lib/services.ts'
import { median, round } from '../lib/stats.ts'

const EDIT_SOURCE = 'gpu-node/tools/train-model/quantize.py'
const EDIT_TOKENS = 128
const ROWS = 32
const NO_COPY_PROMPT = 64
const NO_COPY_TOKENS = 48
/** The pilot row's budget: more steps than a batch-32 run takes; it is stopped when the run ends. */
const PILOT_TOKENS = 600

export interface SpeculationFigures {
  spec_speedup_edit_batch1: number | null
  spec_over_off_batch32_no_copy: number | null
  /** 1 when every text was equal on both nodes (a figure is a number), else 0. */
  spec_exact: number
}

/**
 * A file, then the same file being rewritten with one name renamed: its first lines are given.
 * `rewrite` is the rest of the renamed file, what a model that copies would answer.
 */
function editPrompt(): { prompt: string; rewrite: string } {
  const code = readFileSync(EDIT_SOURCE, 'utf8').slice(0, 1500)
  const lines = code.replaceAll('block', 'group').split('\n')
  const shown = lines.slice(0, 6).join('\n')
  return { prompt: `# ${EDIT_SOURCE}\n${code}\n\n# ${EDIT_SOURCE}, with "block" renamed to "group"\n${shown}\n`, rewrite: lines.slice(6).join('\n') }
}

/** How many characters an answer copies from the rewrite before it departs: whether the bench measured copying. */
function copiedChars(answer: string, rewrite: string): number {
  let k = 0
  while (k < answer.length && answer[k] === rewrite[k]) k++
  return k
}

type Node = { name: 'auto' | 'off'; node: GpuNode }

export async function runSpeculation(ctx: BenchContext, raw: Record<string, unknown>): Promise<SpeculationFigures> {
  const nodes: Node[] = []
  try {
    for (const mode of ['off', 'auto'] as const) nodes.push({ name: mode, node: await startGpuNode({ modelDir: DEFAULT_MODEL_DIR, env: { SPEC_DECODING: mode, MAX_BATCH: String(ROWS) } }) })
    const agent = benchAgent()
    const edit = await runEdit(ctx, nodes, agent)
    const batch = await runNoCopy(ctx, nodes, agent)
    await agent.close()
    const exact = edit.exact && batch.exact
    raw.speculation = { model: DEFAULT_MODEL_DIR, edit: edit.raw, no_copy_batch32: batch.raw, exact }
    ctx.log(`speculation: edit batch 1 auto ÷ off ${edit.ratio ?? '–'}, batch 32 no copy ${batch.ratio ?? '–'}, texts equal: ${exact}`)
    return { spec_speedup_edit_batch1: edit.ratio, spec_over_off_batch32_no_copy: batch.ratio, spec_exact: exact ? 1 : 0 }
  } finally {
    await Promise.all(nodes.map((n) => n.node.stop()))
  }
}

const complete = (node: GpuNode, text: string, maxTokens: number, agent: Dispatcher, sampling?: { temperature: number; seed: number }) =>
  streamCompletion(node.url, node.model, text, maxTokens, { captureText: true, dispatcher: agent, ...(sampling ? { sampling } : {}) })

async function specCounts(node: GpuNode) {
  const s = parseProm(await node.metricsText())
  return { steps: promValue(s, 'zl_spec_decode_steps_total'), draft: promValue(s, 'zl_spec_decode_num_draft_tokens_total'), accepted: promValue(s, 'zl_spec_decode_num_accepted_tokens_total') }
}

/** What the auto node verified and accepted while `work` ran. */
async function counted<T>(auto: GpuNode, work: () => Promise<T>): Promise<{ result: T; verify_steps: number; draft_tokens: number; accepted_tokens: number }> {
  const before = await specCounts(auto)
  const result = await work()
  const after = await specCounts(auto)
  return { result, verify_steps: after.steps - before.steps, draft_tokens: after.draft - before.draft, accepted_tokens: after.accepted - before.accepted }
}

/** Rounds alternate which node goes first. */
const inTurn = (nodes: Node[], round: number) => (round % 2 === 0 ? nodes : [...nodes].reverse())

async function runEdit(ctx: BenchContext, nodes: Node[], agent: Dispatcher) {
  const { prompt, rewrite } = editPrompt()
  const rounds = ctx.quick ? 3 : 7
  const rates: Record<string, number[]> = { auto: [], off: [] }
  const texts: Record<string, Set<string>> = { auto: new Set(), off: new Set() }
  const auto = nodes.find((n) => n.name === 'auto')!.node
  // A first request each: the runtime's first steps at a new width are not the bench's.
  for (const n of nodes) await complete(n.node, prompt, 16, agent)
  const { verify_steps, draft_tokens, accepted_tokens } = await counted(auto, async () => {
    for (let r = 0; r < rounds; r++) {
      for (const n of inTurn(nodes, r)) {
        const rec = await complete(n.node, prompt, EDIT_TOKENS, agent)
        rates[n.name]!.push(decodeRate(rec))
        texts[n.name]!.add(rec.text ?? '')
      }
    }
  })
  const ratio = round(median(rates.auto!) / median(rates.off!))
  const exact = texts.auto!.size === 1 && texts.off!.size === 1 && [...texts.auto!][0] === [...texts.off!][0]
  const distinct = { auto: texts.auto!.size, off: texts.off!.size }
  const answer = [...texts.off!][0] ?? ''
  const copied = { chars: copiedChars(answer, rewrite), of: answer.length }
  ctx.log(`speculation, edit batch 1: decode ${round(median(rates.auto!), 1)} tok/s auto, ${round(median(rates.off!), 1)} off; auto verified ${draft_tokens} draft tokens in ${verify_steps} steps, accepted ${accepted_tokens}; the answer copies the rewrite for ${copied.chars} of its ${copied.of} characters`)
  return { ratio, exact, raw: { source: EDIT_SOURCE, completion_tokens: EDIT_TOKENS, rounds, decode_tok_s: { auto: round(median(rates.auto!), 2), off: round(median(rates.off!), 2) }, verify_steps, draft_tokens, accepted_tokens, texts_equal: exact, distinct_texts: distinct, answer_copies_rewrite_chars: copied } }
}

/**
 * A row that decodes throughout a batch-32 run, on both nodes alike. zl-code's 4-bit MatMulNBits
 * sums a one-row step in another order than a step of several rows (ONNX Runtime's single-row
 * kernel), and whether a row ever decoded alone (the first arrival before the rest joined, the
 * last to finish) depends on arrival timing over HTTP. With the pilot every step has two rows or
 * more, so the texts of the two nodes differ only if speculation changes them.
 */
async function startPilot(node: GpuNode, agent: Dispatcher): Promise<{ stop(): Promise<void> }> {
  const ctrl = new AbortController()
  // Sampled like the 32, so its answer copies nothing either and gives speculation nothing to verify.
  const done = streamCompletion(node.url, node.model, textPromptOfLength(DEFAULT_MODEL_DIR, NO_COPY_PROMPT, 7).text, PILOT_TOKENS, { dispatcher: agent, signal: ctrl.signal, sampling: { temperature: 1, seed: 7 } })
  await waitUntil('speculation bench: the pilot row decoding', async () => promValue(parseProm(await node.metricsText()), 'zl_num_requests_running') >= 1, 30_000, 10)
  return {
    async stop() {
      ctrl.abort()
      await done
    },
  }
}

/** Tokens after the first over the time after the first token, per second. */
function decodeRate(rec: RequestRecord): number {
  if (rec.ttftMs === undefined || rec.tokens < 2) throw new Error(`speculation bench: a request failed (${rec.status} ${rec.error ?? ''})`)
  return ((rec.tokens - 1) * 1000) / (rec.totalMs - rec.ttftMs)
}

async function runNoCopy(ctx: BenchContext, nodes: Node[], agent: Dispatcher) {
  const prompts = Array.from({ length: ROWS }, (_, i) => textPromptOfLength(DEFAULT_MODEL_DIR, NO_COPY_PROMPT, 40 + i).text)
  const rounds = ctx.quick ? 2 : 5
  const rates: Record<string, number[]> = { auto: [], off: [] }
  const texts: Record<string, string[][]> = { auto: [], off: [] }
  const auto = nodes.find((n) => n.name === 'auto')!.node
  const { verify_steps, draft_tokens, accepted_tokens } = await counted(auto, async () => {
    for (let r = 0; r < rounds; r++) {
      for (const n of inTurn(nodes, r)) {
        const pilot = await startPilot(n.node, agent)
        const started = performance.now()
        const recs = await Promise.all(prompts.map((p, i) => complete(n.node, p, NO_COPY_TOKENS, agent, { temperature: 1, seed: 1000 * r + i })))
        const ms = performance.now() - started
        await pilot.stop()
        if (recs.some((x) => x.status !== 200 || x.tokens !== NO_COPY_TOKENS)) throw new Error('speculation bench: a batch-32 request failed')
        rates[n.name]!.push((recs.reduce((s, x) => s + x.tokens, 0) * 1000) / ms)
        texts[n.name]!.push(recs.map((x) => x.text ?? ''))
      }
    }
  })
  const ratio = round(median(rates.auto!) / median(rates.off!))
  const exact = JSON.stringify(texts.auto) === JSON.stringify(texts.off)
  const differing = texts.auto!.flatMap((round, r) => round.flatMap((t, i) => (t === texts.off![r]![i] ? [] : [`${r}:${i}`])))
  ctx.log(`speculation, batch 32 no copy: ${round(median(rates.auto!), 1)} tok/s auto, ${round(median(rates.off!), 1)} off; auto verified ${draft_tokens} draft tokens in ${verify_steps} steps, accepted ${accepted_tokens}`)
  return { ratio, exact, raw: { rows: ROWS, prompt_tokens: NO_COPY_PROMPT, completion_tokens: NO_COPY_TOKENS, rounds, tok_s: { auto: round(median(rates.auto!), 2), off: round(median(rates.off!), 2) }, verify_steps, draft_tokens, accepted_tokens, texts_equal: exact, differing_rows: differing } }
}
