/**
 * Per-op-type time of decode steps of one model.onnx (ONNX Runtime's own profiler), to see where
 * a step goes. Usage: npx tsx bench/probe/op-profile.ts DIR/model.onnx [BxT] [steps]
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs'
import * as ort from 'onnxruntime-node'
import { modelFeeds, presentsOf, type LayerKv } from '../../gpu-node/src/model/batch-kv-cache.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { assertConcatKv } from '../lib/concat-only.ts'
import { readSessionIo } from '../../gpu-node/src/model/session-io.ts'

const [path, c = '32x96', stepsArg = '8'] = process.argv.slice(2)
const PREFIX = `zl-op-profile-${process.pid}`
const [rows, t] = c.split('x').map(Number)
const session = await ort.InferenceSession.create(path, { executionProviders: ['cpu'], graphOptimizationLevel: 'all', enableProfiling: true, profileFilePrefix: `/tmp/${PREFIX}` })
const io = readSessionIo(session, readModelDir(path.replace(/\/model\.onnx$/, '')).config)
assertConcatKv(io, path)
const shape = [rows, io.numKvHeads, t, io.headDim]
let past: LayerKv[] = Array.from({ length: io.numLayers }, () => ({
  key: new ort.Tensor('float32', new Float32Array(rows * io.numKvHeads * t * io.headDim), shape),
  value: new ort.Tensor('float32', new Float32Array(rows * io.numKvHeads * t * io.headDim), shape),
}))
let width = t
for (let s = 0; s < Number(stepsArg); s++) {
  const feeds = modelFeeds(io, new BigInt64Array(rows).fill(42n), [rows, 1], new BigInt64Array(rows * (width + 1)).fill(1n), width + 1, new BigInt64Array(rows).fill(BigInt(width)), past, width)
  past = presentsOf(io, await session.run(feeds))
  width++
}
// endProfiling returns nothing through this binding: find the file by its prefix.
session.endProfiling()
const file = `/tmp/${readdirSync('/tmp').find((f) => f.startsWith(PREFIX))}`
const events = JSON.parse(readFileSync(file, 'utf8')) as Array<{ cat: string; name: string; dur: number; args?: { op_name?: string } }>
rmSync(file)
const byOp = new Map<string, number>()
const byNode = new Map<string, number>()
let runs = 0
for (const e of events) {
  if (e.cat === 'Session' && e.name === 'model_run') runs += e.dur
  if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue
  const op = e.args?.op_name ?? '?'
  byOp.set(op, (byOp.get(op) ?? 0) + e.dur)
  byNode.set(e.name, (byNode.get(e.name) ?? 0) + e.dur)
}
const steps = Number(stepsArg)
console.log(`${c}: model_run ${(runs / steps / 1000).toFixed(2)} ms/step`)
for (const [op, us] of [...byOp].sort((a, b) => b[1] - a[1])) console.log(`  ${op.padEnd(24)} ${(us / steps / 1000).toFixed(2)} ms`)
if (process.env.NODES) for (const [n, us] of [...byNode].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.NODES))) console.log(`    ${n.padEnd(40)} ${(us / steps / 1000).toFixed(2)} ms`)
