/**
 * The GPU node's composition root for inference: the model side (runner, tokenizer, prompt
 * encoder) and the engine that schedules it, built from one config. The model side never
 * imports the engine; this file is where the two meet.
 */
import { Engine } from './engine/engine.ts'
import type { EngineLimits, EngineObserver } from './engine/types.ts'
import { loadModel, type LoadModelOptions, type ServedFiles } from './model/load-model.ts'
import type { PromptEncoder } from './model/prompt-encoder.ts'
import type { ModelInfo } from './model/runner.ts'

export interface ComposeEngineOptions extends Omit<LoadModelOptions, 'kvBudgetBytes' | 'prefixBlockTokens'> {
  limits: EngineLimits
  observer?: EngineObserver
}

export interface ComposedEngine {
  encoder: PromptEncoder
  engine: Engine
  info: ModelInfo
  served: ServedFiles
}

export async function composeEngine(opts: ComposeEngineOptions): Promise<ComposedEngine> {
  const { limits, observer, ...model } = opts
  const { runner, tokenizer, encoder, served } = await loadModel({ ...model, kvBudgetBytes: limits.kvBudgetBytes, ...(limits.prefixBlockTokens ? { prefixBlockTokens: limits.prefixBlockTokens } : {}) })
  const engine = new Engine({ runner, modelKey: encoder.modelId, decoder: tokenizer, limits, ...(observer ? { observer } : {}) })
  return { encoder, engine, info: runner.info, served }
}
