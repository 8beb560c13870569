/**
 * Bench-only worker thread: bare ONNX Runtime decode steps, the reference for the engine's
 * overhead (bench/scenarios/engine.ts). It runs where the engine's runner runs its session — in a
 * worker thread of the same process — with the same session options, so the comparison is
 * engine vs. session.run and nothing else. Each request: batch `rows`, past width `w0` (zero-filled
 * KV: decode cost does not depend on the values), `steps` decode steps, each step's `present.*`
 * fed back as the next `past_key_values.*`; answers the Σ of session.run times.
 */
import { performance } from 'node:perf_hooks'
import { parentPort, workerData } from 'node:worker_threads'
import * as ort from 'onnxruntime-node'
import { modelFeeds, presentsOf, type LayerKv } from '../../gpu-node/src/model/batch-kv-cache.ts'
import type { ModelConfig } from '../../gpu-node/src/model/model-dir.ts'
import { readSessionIo } from '../../gpu-node/src/model/session-io.ts'

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
const session = await ort.InferenceSession.create(init.onnxPath, { executionProviders: [init.executionProvider], graphOptimizationLevel: 'all' })
const io = readSessionIo(session, init.config)

parentPort!.on('message', async (job: RawOrtJob) => {
  try {
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
    parentPort!.postMessage({ id: job.id, stepMs })
  } catch (e) {
    parentPort!.postMessage({ id: job.id, error: (e as Error).message })
  }
})
parentPort!.postMessage({ ready: true })
