/**
 * Worker-thread entry: ONNX Runtime's session.run blocks its thread (FACTS.md), so it runs
 * here, never on the thread that serves sockets. Messages: `init` once, then `step` plans.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { ModelStep } from './model-step.ts'
import { readSessionIo } from './session-io.ts'
import type { ModelConfig } from './model-dir.ts'
import { batchCouplingOps } from './graph-ops.ts'
import { openModelSession } from './open-session.ts'
import type { OutputConstraint } from '../../../shared/src/generation.ts'
import type { SessionShape, StepPlan } from './runner.ts'
import { Grammars } from '../structured/grammars.ts'
import { tokenPieces, type EncodedVocab } from '../structured/tokenizer-info.ts'

export interface RunnerWorkerInit {
  onnxPath: string
  /** The graph's name in the model directory, for errors. */
  onnxFile: string
  config: ModelConfig
  eosTokenIds: number[]
  /** The tokenizer's vocabulary as the grammar engine reads it (structured output). */
  vocab?: EncodedVocab
  executionProvider: 'cpu' | 'cuda'
  intraOpThreads?: number
  /** The scheduler's KV budget, which bounds the slot caches' spare (model-step.ts). */
  kvBudgetBytes?: number
  /** Put Optimum-layout graphs on the slot KV path where exact (open-session.ts; default on). */
  slotKvEdit?: boolean
  /** Give graphs without num_logits_to_keep that input (open-session.ts; default on). */
  lastLogitsEdit?: boolean
  /** Tokens per prefix-cache block. */
  prefixBlockTokens?: number
}

type Inbound = { type: 'step'; id: number; plan: StepPlan } | { type: 'prepare'; id: number; constraint: OutputConstraint }

async function start(init: RunnerWorkerInit): Promise<void> {
  const port = parentPort!
  let step: ModelStep
  let grammars: Grammars | undefined
  try {
    const options = {
      executionProviders: [init.executionProvider],
      graphOptimizationLevel: 'all' as const,
      ...(init.intraOpThreads ? { intraOpNumThreads: init.intraOpThreads } : {}),
    }
    const { session, kvPath, logitsPath } = await openModelSession(init.onnxPath, options, { config: init.config, slotKvEdit: init.slotKvEdit ?? true, lastLogitsEdit: init.lastLogitsEdit ?? true })
      .catch((e: Error) => {
        throw new Error(`model directory: ${init.onnxFile}: ONNX Runtime could not load it (${init.executionProvider} provider): ${e.message}`)
      })
    const io = readSessionIo(session, init.config, init.onnxFile)
    grammars = init.vocab ? new Grammars(init.vocab, init.eosTokenIds) : undefined
    const vocab = init.vocab ? { tokenPiece: tokenPieces(init.vocab), vocabSize: init.vocab.tokens.length } : {}
    step = new ModelStep(session, io, init.eosTokenIds, { kvBudgetBytes: init.kvBudgetBytes, prefixBlockTokens: init.prefixBlockTokens, ...(grammars ? { grammars } : {}), ...vocab })
    const shape: SessionShape = { numLayers: io.numLayers, numKvHeads: io.numKvHeads, headDim: io.headDim, kvType: io.kvType, hasPositionIds: io.hasPositionIds, kvCache: io.kvCache, couplingOps: batchCouplingOps(init.onnxPath), kvPath, logitsPath }
    port.postMessage({ type: 'ready', io: shape })
  } catch (e) {
    port.postMessage({ type: 'fatal', message: (e as Error).message })
    return
  }
  // Steps are strictly sequential: the engine awaits each result before sending the next plan.
  // A grammar compiles in between (or while ONNX Runtime runs a step), never inside a step's JS.
  port.on('message', async (msg: Inbound) => {
    try {
      if (msg.type === 'prepare') {
        if (!grammars) throw new Error('structured output is not available for this model')
        await grammars.compile(msg.constraint)
        port.postMessage({ type: 'result', id: msg.id })
        return
      }
      const result = await step.run(msg.plan)
      port.postMessage({ type: 'result', id: msg.id, result })
    } catch (e) {
      port.postMessage({ type: 'error', id: msg.id, message: (e as Error).message })
    }
  })
}

void start(workerData as RunnerWorkerInit)
