/**
 * Bench-only worker thread: bare ONNX Runtime decode steps, the reference for the engine's
 * overhead (bench/scenarios/engine-overhead.ts). It runs where the engine's runner runs its session — in a
 * worker thread of the same process — with the same session options, so the comparison is
 * engine vs. session.run and nothing else. Each request: batch `rows`, past width `w0` (zero-filled
 * KV: decode cost does not depend on the values), `steps` decode steps; answers each step's time.
 * It drives the graph the engine's runner drives (session-io.ts tells which interface it has):
 * - concat (Optimum): each step's `present.*` fed back as the next `past_key_values.*`; a step's
 *   time is its session.run.
 * - slots (the generated presets, and Optimum-layout graphs the runner edits onto the slot path at
 *   load: the session is opened the runner's way, gpu-node/src/model/open-session.ts): fixed-capacity K/V buffers, grown as the runner grows its own
 *   (slot-kv-cache.ts), so each step attends over the same capacity as the engine's, fed as past
 *   with the mask covering the filled slots; the step's `new_key_values.*` are written into the
 *   next slot. A step's time is session.run plus that write (the interface needs it; the concat
 *   graph does its copy inside session.run); regrowing the buffers is left out of the time.
 */
import { performance } from 'node:perf_hooks'
import { parentPort, workerData } from 'node:worker_threads'
import * as ort from 'onnxruntime-node'
import { modelFeeds, presentsOf, type LayerKv } from '../../gpu-node/src/model/batch-kv-cache.ts'
import type { ModelConfig } from '../../gpu-node/src/model/model-dir.ts'
import { openModelSession } from '../../gpu-node/src/model/open-session.ts'
import { readSessionIo } from '../../gpu-node/src/model/session-io.ts'
import { grownCapacity } from '../../gpu-node/src/model/slot-kv-cache.ts'

export interface RawOrtInit {
  onnxPath: string
  config: ModelConfig
  executionProvider: 'cpu' | 'cuda'
}

export interface RawOrtJob {
  id: number
  rows: number
  w0: number
  steps: number
}

const init = workerData as RawOrtInit
const { session } = await openModelSession(init.onnxPath, { executionProviders: [init.executionProvider], graphOptimizationLevel: 'all' }, { config: init.config })
const io = readSessionIo(session, init.config)

/** Per-step times of `steps` decode steps through the concat interface. */
async function concatSteps(job: RawOrtJob): Promise<number[]> {
  const shape = [job.rows, io.numKvHeads, job.w0, io.headDim]
  const size = job.rows * io.numKvHeads * job.w0 * io.headDim
  let past: LayerKv[] = Array.from({ length: io.numLayers }, () => ({
    key: new ort.Tensor('float32', new Float32Array(size), shape),
    value: new ort.Tensor('float32', new Float32Array(size), shape),
  }))
  const ids = new BigInt64Array(job.rows).fill(42n)
  let width = job.w0
  const stepMs: number[] = []
  for (let s = 0; s < job.steps; s++) {
    const mask = new BigInt64Array(job.rows * (width + 1)).fill(1n)
    const positions = new BigInt64Array(job.rows).fill(BigInt(width))
    const feeds = modelFeeds(io, ids, [job.rows, 1], mask, width + 1, positions, past, width)
    const t0 = performance.now()
    const out = await session.run(feeds)
    stepMs.push(performance.now() - t0)
    past = presentsOf(io, out)
    width++
  }
  return stepMs
}

/** Per-step times of `steps` decode steps through the slot interface. */
async function slotSteps(job: RawOrtJob): Promise<number[]> {
  const { rows, w0 } = job
  const { numKvHeads: h, headDim: d } = io
  let cap = 0
  let bufs: Float32Array[] = []
  const ids = new BigInt64Array(rows).fill(42n)
  const stepMs: number[] = []
  for (let s = 0, width = w0; s < job.steps; s++, width++) {
    if (width + 1 > cap) {
      const next = grownCapacity(width + 1)
      bufs = Array.from({ length: 2 * io.numLayers }, (_, i) => {
        const buf = new Float32Array(rows * h * next * d)
        for (let bh = 0; bh < rows * h && cap > 0; bh++) buf.set(bufs[i].subarray(bh * cap * d, (bh * cap + width) * d), bh * next * d)
        return buf
      })
      cap = next
    }
    const mask = new BigInt64Array(rows * (cap + 1))
    for (let r = 0; r < rows; r++) {
      mask.fill(1n, r * (cap + 1), r * (cap + 1) + width)
      mask[r * (cap + 1) + cap] = 1n
    }
    const positions = new BigInt64Array(rows).fill(BigInt(width))
    const shape = [rows, h, cap, d]
    const past: LayerKv[] = Array.from({ length: io.numLayers }, (_, i) => ({
      key: new ort.Tensor('float32', bufs[2 * i], shape),
      value: new ort.Tensor('float32', bufs[2 * i + 1], shape),
    }))
    const feeds = modelFeeds(io, ids, [rows, 1], mask, cap + 1, positions, past, cap)
    const t0 = performance.now()
    const out = await session.run(feeds)
    presentsOf(io, out).forEach((layer, i) => {
      for (const [t, buf] of [[layer.key, bufs[2 * i]], [layer.value, bufs[2 * i + 1]]] as const) {
        const data = t.data as Float32Array
        for (let bh = 0; bh < rows * h; bh++) buf.set(data.subarray(bh * d, (bh + 1) * d), (bh * cap + width) * d)
      }
    })
    stepMs.push(performance.now() - t0)
  }
  return stepMs
}

parentPort!.on('message', async (job: RawOrtJob) => {
  try {
    const stepMs = io.kvCache === 'slots' ? await slotSteps(job) : await concatSteps(job)
    parentPort!.postMessage({ id: job.id, stepMs })
  } catch (e) {
    parentPort!.postMessage({ id: job.id, error: (e as Error).message })
  }
})
parentPort!.postMessage({ ready: true })
