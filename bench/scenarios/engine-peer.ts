/**
 * 6. The engine beside transformers.js (the library a Node.js user would pick instead) on the
 * same graph: a 58.5 M-parameter GPT-2 written by test/torch's classes (rig/gpt2_peer_model.py),
 * float32, `onnx/model.onnx`, which both load — our GPU node (HTTP, slot KV edit at load, as
 * served, its prefix cache off) and transformers.js @ TRANSFORMERS_JS_VERSION in its own process
 * (generate(), in process, no HTTP), both on 2 intra-op threads.
 *
 * Rounds alternate which side goes first. Before each request the other side is given
 * PAUSE_MS: ONNX Runtime's intra-op threads spin for a while after a run, and a request sent
 * right after the other process's run met those spinning threads on the two cores, which
 * measured the two processes' overlap rather than either side.
 *
 * - b1: a 64-token prompt; TTFT is our first text frame against the peer's whole
 *   `max_new_tokens: 1` generate(); decode tokens/s is 64 new tokens after the first.
 * - c16: 16 different 64-token prompts at once against the peer's batched generate() of the same
 *   16 (equal length: its best case, no padding); tokens/s over the whole wall time, and our p99
 *   TTFT against the peer's first token (every row of a batch gets it together).
 * - greedy: the b1 decode rows, our text against the peer's ids decoded by the same tokenizer.
 *   A row that parts from the peer's counts as equal only at a float tie (lib/float-tie.ts).
 */
import { fork, spawnSync, type ChildProcess } from 'node:child_process'
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import { generateModel } from '../../gpu-node/tools/generate-model/generate-model.ts'
import { benchAgent, streamCompletion } from '../load/client.ts'
import { ensureTransformersJs, TRANSFORMERS_JS_VERSION } from '../lib/peer-transformers-js.ts'
import { greedySplit, TIE } from '../lib/float-tie.ts'
import { textPromptOfLength } from '../lib/prompts.ts'
import { runPrefillPaths } from './engine-prefill-paths.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startGpuNode } from '../lib/services.ts'
import { median, percentile, round } from '../lib/stats.ts'

const MODEL_DIR = 'models/.bench/gpt2-58m'
const PYTHON = '/usr/bin/python3'
const THREADS = 2
const PROMPT = 64
const NEW = 64
const CONCURRENT = 16
const PAUSE_MS = 1000

interface PeerAnswer {
  promptTokens: number[]
  ids: number[][]
  firstMs: number
  totalMs: number
}

/** The shared graph, with the `small` preset's GPT-2 tokenizer and config (its shape). */
async function ensurePeerModel(ctx: BenchContext): Promise<string | undefined> {
  if (existsSync(join(MODEL_DIR, 'onnx', 'model.onnx'))) return MODEL_DIR
  const tmp = mkdtempSync(join(tmpdir(), 'zl-bench-peer-'))
  try {
    await generateModel({ preset: 'small', outDir: tmp, seed: 42, kvCache: 'concat' })
    ctx.log(`writing ${MODEL_DIR} with test/torch's classes (PyTorch)`)
    const r = spawnSync(PYTHON, ['bench/rig/gpt2_peer_model.py', MODEL_DIR], { encoding: 'utf8', timeout: 600_000 })
    if (r.status !== 0) return undefined
    const { zerolayer: _generated, ...config } = JSON.parse(readFileSync(join(tmp, 'config.json'), 'utf8')) as Record<string, unknown>
    writeFileSync(join(MODEL_DIR, 'config.json'), `${JSON.stringify(config, null, 2)}\n`)
    for (const f of ['generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tmp, f), join(MODEL_DIR, f))
    return MODEL_DIR
  } finally {
    rmSync(tmp, { recursive: true, force: true })
  }
}

function startPeer(root: string, modelDir: string): Promise<{ ask: (texts: string[], maxTokens: number) => Promise<PeerAnswer>; child: ChildProcess }> {
  const worker = join(root, 'peer-worker.mjs')
  copyFileSync(join(import.meta.dirname, '..', 'rig', 'transformers-js-peer.mjs'), worker)
  const child = fork(worker, [resolve(modelDir), String(THREADS)], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  // One message at a time: the next one (its readiness, then each answer) or its exit settles the one waiting.
  let waiting: { done: (m: unknown) => void; fail: (e: Error) => void } | undefined
  child.on('message', (m) => waiting?.done(m))
  child.on('exit', (code) => waiting?.fail(new Error(`transformers.js peer exited (${code})`)))
  const next = () => new Promise<unknown>((done, fail) => (waiting = { done, fail }))
  const ask = (texts: string[], maxTokens: number) => {
    const answer = next() as Promise<PeerAnswer>
    child.send({ texts, maxTokens })
    return answer
  }
  return next().then(() => ({ ask, child }))
}

const pause = () => new Promise((r) => setTimeout(r, PAUSE_MS))

export async function runPeer(ctx: BenchContext, raw: Record<string, unknown>, notes: string[]): Promise<Record<string, number | null>> {
  const none = { ttft_b1_over_transformers_js: null, decode_b1_over_transformers_js: null, c16_tokens_per_s_over_transformers_js_batched: null, c16_p99_ttft_over_transformers_js_batched: null, greedy_equal_to_transformers_js: null }
  const modelDir = await ensurePeerModel(ctx)
  if (!modelDir) {
    notes.push(`transformers.js comparison skipped: ${PYTHON} with torch could not write the shared graph (apt-get install python3-torch python3-onnx)`)
    return none
  }
  raw.prefill_paths = await runPrefillPaths(ctx, modelDir, THREADS, PROMPT)
  const root = ensureTransformersJs((l) => ctx.log(l))
  const tok = new ModelTokenizer(readModelDir(modelDir))
  // No prefix cache: the peer has none, and the few distinct prompts come back every other round.
  const node = await startGpuNode({ modelDir, env: { INTRA_OP_THREADS: String(THREADS), PREFIX_CACHE_MB: '0' } })
  const peer = await startPeer(root, modelDir)
  const agent = benchAgent()
  const ours = (text: string, maxTokens: number) =>
    streamCompletion(node.url, node.model, text, maxTokens, { dispatcher: agent, captureText: true })
  const rounds = ctx.quick ? 4 : 10
  const b1 = { ours: { ttft: [] as number[], decode: [] as number[] }, peer: { ttft: [] as number[], decode: [] as number[] } }
  const c16 = { ours: { tps: [] as number[], p99: [] as number[] }, peer: { tps: [] as number[], first: [] as number[] } }
  let equal = 0
  let rows = 0
  const differing: Array<{ prompt: number[]; ours: string; theirs: number[] }> = []
  try {
    ctx.log(`transformers.js ${TRANSFORMERS_JS_VERSION} beside the node on ${modelDir}: ${rounds} rounds after 2 warm-ups, ${PAUSE_MS} ms between sides`)
    for (let round_ = -2; round_ < rounds; round_++) {
      const v = 1000 + 40 * (round_ + 2)
      const ttftText = textPromptOfLength(modelDir, PROMPT, v).text
      const decodeText = textPromptOfLength(modelDir, PROMPT, v + 1).text
      const batch = Array.from({ length: CONCURRENT }, (_, i) => textPromptOfLength(modelDir, PROMPT, v + 2 + i).text)
      let oursText = ''
      let peerIds: number[] = []
      for (const side of round_ % 2 === 0 ? (['ours', 'peer'] as const) : (['peer', 'ours'] as const)) {
        if (side === 'ours') {
          await pause()
          const t = await ours(ttftText, 1)
          await pause()
          const d = await ours(decodeText, NEW)
          await pause()
          const started = performance.now()
          const all = await Promise.all(batch.map((text) => ours(text, NEW)))
          const wall = performance.now() - started
          oursText = d.text ?? ''
          if (round_ < 0) continue
          b1.ours.ttft.push(t.ttftMs!)
          b1.ours.decode.push((d.tokens - 1) / ((d.totalMs - d.ttftMs!) / 1000))
          c16.ours.tps.push(all.reduce((s, r) => s + r.tokens, 0) / (wall / 1000))
          c16.ours.p99.push(percentile(all.map((r) => r.ttftMs!), 99))
        } else {
          await pause()
          const t = await peer.ask([ttftText], 1)
          await pause()
          const d = await peer.ask([decodeText], NEW)
          await pause()
          const all = await peer.ask(batch, NEW)
          peerIds = d.ids[0]!
          if (round_ < 0) continue
          b1.peer.ttft.push(t.totalMs)
          b1.peer.decode.push((NEW - 1) / ((d.totalMs - d.firstMs) / 1000))
          c16.peer.tps.push((CONCURRENT * NEW) / (all.totalMs / 1000))
          c16.peer.first.push(all.firstMs)
        }
      }
      if (round_ < 0) continue
      rows++
      if (oursText === tok.decode(peerIds)) equal++
      else differing.push({ prompt: tok.encodeText(decodeText), ours: oursText, theirs: peerIds })
    }
  } finally {
    await agent.close()
    peer.child.kill()
    await node.stop()
  }
  // After both sides stopped: a row that parts from the peer's is read again from the graph.
  const splits = []
  for (const d of differing) splits.push(await greedySplit(readModelDir(modelDir), tok, d.prompt, d.ours, d.theirs))
  const ties = splits.filter((x) => x.tie).length
  const m = (xs: number[]) => round(median(xs), 2)
  raw.peer = {
    library: `@huggingface/transformers@${TRANSFORMERS_JS_VERSION}`,
    model: modelDir,
    threads: THREADS,
    pause_ms: PAUSE_MS,
    rounds,
    b1_ttft_ms: { ours: m(b1.ours.ttft), peer: m(b1.peer.ttft) },
    b1_decode_tokens_per_s: { ours: m(b1.ours.decode), peer: m(b1.peer.decode) },
    c16_tokens_per_s: { ours: m(c16.ours.tps), peer_batched: m(c16.peer.tps) },
    c16_ttft_ms: { ours_p99: m(c16.ours.p99), peer_batched_first: m(c16.peer.first) },
    greedy_rows_equal: `${equal} of ${rows}`,
    greedy_splits: splits.map((x) => ({ at: x.at, gap: x.gap === undefined ? null : round(x.gap, 6), tie: x.tie })),
  }
  notes.push(`transformers.js comparison: our TTFT is over HTTP, the peer's in process; a greedy row that parts from the peer's counts as equal only where it parts at a float tie (the peer's token within ${TIE} of the top logit, read from the graph as exported); ${PAUSE_MS} ms between sides so neither meets the other's spinning threads`)
  return {
    ttft_b1_over_transformers_js: round(median(b1.ours.ttft) / median(b1.peer.ttft)),
    decode_b1_over_transformers_js: round(median(b1.ours.decode) / median(b1.peer.decode)),
    c16_tokens_per_s_over_transformers_js_batched: round(median(c16.ours.tps) / median(c16.peer.tps)),
    c16_p99_ttft_over_transformers_js_batched: round(median(c16.ours.p99) / median(c16.peer.first)),
    greedy_equal_to_transformers_js: round((equal + ties) / rows),
  }
}
