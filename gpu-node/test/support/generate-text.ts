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
