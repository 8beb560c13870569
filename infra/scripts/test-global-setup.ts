import { existsSync } from 'node:fs'

/**
 * Tests run on generated models: make sure the tiny ones exist, and were made by the current
 * generator (a stale cached model is regenerated), before any test file starts.
 */
const GENERATOR = 'gpu-node/tools/generate-model/ensure-model.ts'

export default async function setup(): Promise<void> {
  if (!existsSync(GENERATOR)) return
  const { ensureGeneratedModel } = await import('../../gpu-node/tools/generate-model/ensure-model.ts')
  for (const dir of ['models/tiny', 'models/tiny-llama']) {
    if (await ensureGeneratedModel(dir)) console.log(`[test setup] generated ${dir}`)
  }
}
