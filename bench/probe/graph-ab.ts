/**
 * A/B decode-step time of two concat-KV model.onnx files of the same model (e.g. two generator versions),
 * in one process, alternating per round so machine noise hits both alike: per round the fastest
 * step, then medians over rounds of those and of their ratios to model 0.
 * Usage: npx tsx bench/probe/graph-ab.ts A/model.onnx B/model.onnx [--cases 1x32,32x32,32x96] [--rounds 6] [--steps 6]
 * A case is BxT: batch B, past width T (zero KV: step cost does not depend on the values);
 * `pB` prefixes a prefill case: B rows of T prompt tokens, empty past.
 */
import { parseArgs } from 'node:util'
import { performance } from 'node:perf_hooks'
import * as ort from 'onnxruntime-node'
import { modelFeeds, presentsOf, type LayerKv } from '../../gpu-node/src/model/batch-kv-cache.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { assertConcatKv } from '../lib/concat-only.ts'
import { readSessionIo, type SessionIo } from '../../gpu-node/src/model/session-io.ts'

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { cases: { type: 'string', default: '1x32,32x32,32x96' }, rounds: { type: 'string', default: '6' }, steps: { type: 'string', default: '6' } },
})
const paths = positionals
/**
 * CPU_TIME=1: measure process CPU time (all threads) instead of wall time, with ORT's idle spinning
 * off so waiting threads cost nothing; steadier than wall time while other processes load the machine.
 */
const CPU_TIME = process.env.CPU_TIME === '1'
const clock = (): number => {
  if (!CPU_TIME) return performance.now()
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
const models = await Promise.all(paths.map(async (p, i) => {
  // NO_ARENA=i: model i's session without the CPU memory arena (a session-option A/B).
  const arena = process.env.NO_ARENA !== String(i)
  const session = await ort.InferenceSession.create(p, { executionProviders: ['cpu'], graphOptimizationLevel: 'all', enableCpuMemArena: arena, ...(CPU_TIME ? { extra: { session: { intra_op: { allow_spinning: '0' } } } } : {}) })
  const io = readSessionIo(session, readModelDir(p.replace(/\/model\.onnx$/, '')).config)
  assertConcatKv(io, p)
  return { session, io }
}))

function kv(io: SessionIo, rows: number, width: number): LayerKv[] {
  const shape = [rows, io.numKvHeads, width, io.headDim]
  const size = rows * io.numKvHeads * width * io.headDim
  return Array.from({ length: io.numLayers }, () => ({
    key: new ort.Tensor('float32', new Float32Array(size), shape),
    value: new ort.Tensor('float32', new Float32Array(size), shape),
  }))
}

/** Fastest of `steps` decode steps (presents fed back), or one prefill run repeated. */
async function time(m: (typeof models)[number], c: string, steps: number): Promise<number> {
  const prefill = c.startsWith('p')
  const [rows, t] = c.replace('p', '').split('x').map(Number)
  const ms: number[] = []
  let past = kv(m.io, rows, prefill ? 0 : t)
  let width = prefill ? 0 : t
  const s = prefill ? t : 1
  for (let i = 0; i < steps; i++) {
    const ids = new BigInt64Array(rows * s).fill(42n)
    const mask = new BigInt64Array(rows * (width + s)).fill(1n)
    const positions = BigInt64Array.from({ length: rows * s }, (_, j) => BigInt(width + (j % s)))
    const feeds = modelFeeds(m.io, ids, [rows, s], mask, width + s, positions, past, width)
    const t0 = clock()
    const out = await m.session.run(feeds)
    ms.push(clock() - t0)
    if (!prefill) {
      past = presentsOf(m.io, out)
      width++
    }
  }
  // The fastest step of the round: other processes on a shared machine only ever add time.
  return Math.min(...ms)
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]

const rounds = Number(values.rounds)
console.log(`| case | ${paths.map((_, i) => `model ${i} ms`).join(' | ')} | ${paths.slice(1).map((_, i) => `${i + 1}/0`).join(' | ')} |`)
console.log(`|---|${paths.map(() => '---:').join('|')}|${paths.slice(1).map(() => '---:').join('|')}|`)
for (const c of values.cases!.split(',')) {
  const per: number[][] = models.map(() => [])
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? models.map((_, i) => i) : models.map((_, i) => models.length - 1 - i)
    for (const i of order) per[i].push(await time(models[i], c, Number(values.steps)))
  }
  const meds = per.map(median)
  const ratios = per.slice(1).map((xs) => median(xs.map((x, r) => x / per[0][r])))
  console.log(`| ${c} | ${meds.map((x) => x.toFixed(2)).join(' | ')} | ${ratios.map((x) => x.toFixed(3)).join(' | ')} |`)
}
