/**
 * Do two execution providers generate the same tokens, and how fast does each step? Runs one
 * greedy batch (ragged prompts, so padding is exercised; EOS banned, so every row runs to the
 * end) through the engine's own runner on each provider, then prints per-row agreement and the
 * median decode step time of each. A GPU node's operator runs it once per new build or driver:
 *   EXECUTION_PROVIDER=cuda npx tsx bench/provider-agreement.ts --model models/small
 * It reports rather than asserts: providers sum floats in different orders (and CUDA may use
 * TF32), so a greedy near-tie can flip a token and every later one with it. Exit code 1 only when
 * a provider fails to run at all.
 */
import { parseArgs } from 'node:util'
import { performance } from 'node:perf_hooks'
import { GREEDY } from '../gpu-node/src/engine/types.ts'
import { readModelDir, type ModelDir } from '../gpu-node/src/model/model-dir.ts'
import { OnnxRunner } from '../gpu-node/src/model/onnx-runner.ts'

type Provider = 'cpu' | 'cuda'

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/small' },
    batch: { type: 'string', default: '16' },
    prompt: { type: 'string', default: '32' },
    new: { type: 'string', default: '64' },
    against: { type: 'string', default: 'cpu' },
  },
})
const provider = (process.env.EXECUTION_PROVIDER ?? 'cpu') as Provider
const reference = values.against as Provider
const batch = Number(values.batch)
const newTokens = Number(values.new)
const promptLen = Number(values.prompt)

/** Rows get prompts 0, 3, 6 or 9 tokens shorter than --prompt, so the batch is left-padded. */
function prompts(): number[][] {
  return Array.from({ length: batch }, (_, i) => Array.from({ length: promptLen - (i % 4) * 3 }, (_, j) => 1 + ((i * 13 + j * 7) % 200)))
}

async function generate(dir: ModelDir, ep: Provider): Promise<{ rows: number[][]; stepMs: number; loadMs: number }> {
  const t0 = performance.now()
  const runner = await OnnxRunner.start(dir, { executionProvider: ep })
  const loadMs = performance.now() - t0
  try {
    const rows: number[][] = prompts().map(() => [])
    const push = (r: { seqIds: number[]; tokens: number[] }) => r.seqIds.forEach((id, k) => rows[id - 1].push(r.tokens[k]))
    const first = await runner.step({
      release: [],
      decode: false,
      prefill: prompts().map((tokens, i) => ({ seqId: i + 1, tokens, last: true, start: { sampling: GREEDY, promptLen: tokens.length, banEos: true, tokens } })),
    })
    push(first.joined)
    const times: number[] = []
    for (let s = 1; s < newTokens; s++) {
      const t = performance.now()
      push((await runner.step({ release: [], decode: true, prefill: [] })).decoded)
      times.push(performance.now() - t)
    }
    times.sort((a, b) => a - b)
    return { rows, stepMs: times[times.length >> 1], loadMs }
  } finally {
    await runner.close()
  }
}

const dir = readModelDir(values.model!)
const ref = await generate(dir, reference)
const got = await generate(dir, provider)
const firstDiff = got.rows.map((row, i) => row.findIndex((t, k) => t !== ref.rows[i][k]))
const same = firstDiff.filter((d) => d === -1).length
console.log(`model ${values.model}, batch ${batch}, prompts ${promptLen - 9}..${promptLen} tokens, ${newTokens} greedy tokens per row`)
console.log(`| provider | session start ms | decode step ms (median) | tokens/s |`)
console.log('|---|---:|---:|---:|')
for (const [name, r] of [[reference, ref], [provider, got]] as const) {
  console.log(`| ${name} | ${r.loadMs.toFixed(0)} | ${r.stepMs.toFixed(2)} | ${((batch * 1000) / r.stepMs).toFixed(0)} |`)
}
console.log(`rows identical to ${reference}: ${same} / ${batch}`)
if (same < batch) console.log(`first differing position per differing row: ${firstDiff.filter((d) => d !== -1).join(', ')}`)
