import { Engine } from '../engine/engine.ts'
import type { BatchingPolicy } from '../engine/batching-policy.ts'
import type { EngineObserver } from '../engine/types.ts'
import { ChatTemplate } from './chat-template.ts'
import { readModelDir } from './model-dir.ts'
import { OnnxRunner } from './onnx-runner.ts'
import type { PromptEncoder } from './prompt-encoder.ts'
import type { ModelInfo } from './runner.ts'
import { ModelTokenizer } from './tokenizer.ts'

export interface LoadModelOptions {
  modelDir: string
  executionProvider: 'cpu' | 'cuda'
  intraOpThreads?: number
  maxBatch: number
  maxQueue: number
  kvBudgetMb: number
  prefillChunk: number
  observer?: EngineObserver
  /** Benchmarks only: the static-batching baseline. */
  policy?: BatchingPolicy
}

export interface LoadedModel {
  encoder: PromptEncoder
  engine: Engine
  info: ModelInfo
}

/** model dir → tokenizer + chat template + ONNX Runtime worker → engine. */
export async function loadModel(opts: LoadModelOptions): Promise<LoadedModel> {
  const dir = readModelDir(opts.modelDir)
  const tokenizer = new ModelTokenizer(dir)
  const template = new ChatTemplate(dir)
  const kvBudgetBytes = opts.kvBudgetMb * 1024 * 1024
  const runner = await OnnxRunner.start(dir, { executionProvider: opts.executionProvider, kvBudgetBytes, ...(opts.intraOpThreads ? { intraOpThreads: opts.intraOpThreads } : {}) })
  const engine = new Engine({
    runner,
    decoder: tokenizer,
    limits: {
      maxBatch: opts.maxBatch,
      maxQueue: opts.maxQueue,
      kvBudgetBytes,
      prefillChunkTokens: opts.prefillChunk,
    },
    ...(opts.observer ? { observer: opts.observer } : {}),
    ...(opts.policy ? { policy: opts.policy } : {}),
  })
  const encoder: PromptEncoder = {
    modelId: dir.modelId,
    contextLength: runner.info.contextLength,
    encodeChat: (messages) => tokenizer.encodeTemplate(template.render(messages)),
    encodeText: (prompt) => tokenizer.encodeText(prompt),
  }
  return { encoder, engine, info: runner.info }
}
