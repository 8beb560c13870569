/**
 * What one prefill step costs on each path the node can drive a graph through, on the graph of
 * the transformers.js comparison (engine-peer.ts: a 58.5 M GPT-2 exported without
 * num_logits_to_keep, concat KV). A 64-token prompt from an empty cache is one step of the
 * product's worker-thread runner (2 intra-op threads); the sequence is then released. Paths:
 * - as_exported: concat KV, logits for every position: what transformers.js runs;
 * - concat_last_logits: concat KV, the head over the last position only (last-logits-edit.ts);
 * - slots_all_logits: the slot KV edit alone (slot-kv-edit.ts);
 * - slots_last_logits: both edits, as the node serves this graph.
 * Rounds rotate the order; each step waits PAUSE_MS after the one before, so a session never meets
 * another's spinning intra-op threads. The figures are each path's fastest step ÷ as_exported's:
 * the four sessions' weights take turns in the caches and this machine's neighbours come and go,
 * which moves the medians from run to run; the fastest of 16 is each path's own cost.
 */
import { GREEDY } from '../../gpu-node/src/engine/types.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { OnnxRunner } from '../../gpu-node/src/model/onnx-runner.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round } from '../lib/stats.ts'
import { rotate } from './engine-rig.ts'

const PATHS = {
  as_exported: { slotKvEdit: false, lastLogitsEdit: false },
  concat_last_logits: { slotKvEdit: false, lastLogitsEdit: true },
  slots_all_logits: { slotKvEdit: true, lastLogitsEdit: false },
  slots_last_logits: { slotKvEdit: true, lastLogitsEdit: true },
} as const
type PrefillPath = keyof typeof PATHS
const NAMES = Object.keys(PATHS) as PrefillPath[]
const PAUSE_MS = 150

export async function runPrefillPaths(ctx: BenchContext, modelDir: string, threads: number, promptTokens: number): Promise<Record<string, unknown>> {
  const dir = readModelDir(modelDir)
  const runners = new Map<PrefillPath, OnnxRunner>()
  try {
    for (const name of NAMES) runners.set(name, await OnnxRunner.start(dir, { executionProvider: 'cpu', intraOpThreads: threads, ...PATHS[name] }))
    const paths = Object.fromEntries([...runners].map(([n, r]) => [n, { kvCache: r.info.kvPath?.kvCache, lastLogitsOnly: r.info.logitsPath?.lastOnly }]))
    const tokenizer = new ModelTokenizer(dir)
    let seqId = 1
    const step = async (runner: OnnxRunner, text: string): Promise<number> => {
      const tokens = tokenizer.encodeText(text).slice(0, promptTokens)
      const id = seqId++
      const t0 = performance.now()
      await runner.step({ release: [], decode: false, prefill: [{ seqId: id, tokens, last: true, start: { sampling: GREEDY, promptLen: tokens.length, banEos: true, tokens } }] })
      const ms = performance.now() - t0
      await runner.step({ release: [id], decode: false, prefill: [] })
      await new Promise((r) => setTimeout(r, PAUSE_MS))
      return ms
    }
    const rounds = ctx.quick ? 6 : 16
    const times = Object.fromEntries(NAMES.map((n) => [n, [] as number[]])) as Record<PrefillPath, number[]>
    for (let r = -2; r < rounds; r++) {
      const text = textPromptOfLength(modelDir, promptTokens, 5000 + r).text
      for (const name of rotate(NAMES, r + 2)) {
        const ms = await step(runners.get(name)!, text)
        if (r >= 0) times[name].push(ms)
      }
    }
    const fastest = (xs: readonly number[]) => Math.min(...xs)
    const base = fastest(times.as_exported)
    const over = Object.fromEntries(NAMES.filter((n) => n !== 'as_exported').map((n) => [n, round(fastest(times[n]) / base)]))
    ctx.log(`prefill step, ${promptTokens} tokens, ÷ as exported: ${Object.entries(over).map(([n, v]) => `${n} ${v}`).join(', ')}`)
    return { paths, rounds, prompt_tokens: promptTokens, step_over_as_exported: over, median_step_over_as_exported: Object.fromEntries(NAMES.map((n) => [n, round(median(times[n]) / median(times.as_exported))])) }
  } finally {
    for (const r of runners.values()) await r.close().catch(() => {})
  }
}
