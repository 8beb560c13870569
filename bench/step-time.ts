/**
 * Decode step time vs batch size on one model, through the same worker-thread runner the engine
 * uses: B sequences of a fixed prompt length are prefilled, then `steps` decode steps are timed.
 * Usage: npx tsx bench/step-time.ts [--model models/small] [--prompt 32] [--steps 16] [--batches 1,2,4,8,16,32,64]
 * Prints a markdown table; absolute times depend on the machine, compare rows within one run.
 */
import { parseArgs } from 'node:util'
import { performance } from 'node:perf_hooks'
import { readModelDir } from '../gpu-node/src/model/model-dir.ts'
import { OnnxRunner } from '../gpu-node/src/model/onnx-runner.ts'
import { GREEDY } from '../gpu-node/src/engine/types.ts'

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'models/small' },
    prompt: { type: 'string', default: '32' },
    steps: { type: 'string', default: '16' },
    batches: { type: 'string', default: '1,2,4,8,16,32,64' },
  },
})
const promptLen = Number(values.prompt)
const steps = Number(values.steps)
const dir = readModelDir(values.model!)
const runner = await OnnxRunner.start(dir, { executionProvider: (process.env.EXECUTION_PROVIDER as 'cpu' | 'cuda') ?? 'cpu' })
let nextSeq = 1
console.log(`| batch | decode step ms (median of ${steps}) | tokens/s |`)
console.log('|---:|---:|---:|')
for (const b of values.batches!.split(',').map(Number)) {
  const ids: number[] = []
  for (let i = 0; i < b; i++) {
    const seqId = nextSeq++
    ids.push(seqId)
    const tokens = Array.from({ length: promptLen }, (_, j) => 1 + ((i * 13 + j * 7) % 200))
    await runner.step({ release: [], decode: false, prefill: [{ seqId, tokens, last: true, start: { sampling: GREEDY, promptLen, banEos: true, tokens } }] })
  }
  const times: number[] = []
  for (let s = 0; s < steps; s++) {
    const t0 = performance.now()
    await runner.step({ release: [], decode: true, prefill: [] })
    times.push(performance.now() - t0)
  }
  await runner.step({ release: ids, decode: false, prefill: [] })
  times.sort((x, y) => x - y)
  const median = times[times.length >> 1]
  console.log(`| ${b} | ${median.toFixed(2)} | ${((b * 1000) / median).toFixed(0)} |`)
}
await runner.close()
