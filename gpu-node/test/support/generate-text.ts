import { GREEDY } from '../../../shared/src/generation.ts'
import { composeEngine } from '../../src/compose-engine.ts'
import type { EngineEvent, EngineHandle, EngineRequest } from '../../src/engine/types.ts'

/** Submits `req` and resolves with its whole text; rejects when it is refused or finishes with an error. */
export function generateText(engine: Pick<EngineHandle, 'submit'>, req: EngineRequest): Promise<string> {
  let text = ''
  return new Promise((resolve, reject) => {
    const r = engine.submit(req, (e: EngineEvent) => {
      if (e.type === 'text') text += e.text
      else if (e.error) reject(new Error(`${req.id}: ${e.error.code}`))
      else resolve(text)
    })
    if (!r.ok) reject(new Error(r.code))
  })
}

/**
 * The 12-token greedy texts of `prompts`, sent together to the model in `modelDir` through the
 * worker-thread runner (a 16-token prefill chunk, so longer prompts are chunked).
 */
export async function greedyTexts(modelDir: string, prompts: readonly string[]): Promise<string[]> {
  const model = await composeEngine({ intraOpThreads: 1, modelDir, executionProvider: 'cpu', limits: { maxBatch: 8, maxQueue: 16, kvBudgetBytes: 256 * 1024 * 1024, prefillChunkTokens: 16 } })
  try {
    const reqs = prompts.map((p, i): EngineRequest => ({ id: `r${i}`, promptTokens: model.encoder.encodeText(p), maxTokens: 12, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true }))
    return await Promise.all(reqs.map((r) => generateText(model.engine, r)))
  } finally {
    await model.engine.close()
  }
}
