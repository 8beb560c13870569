import { existsSync } from 'node:fs'
import { basename, dirname, resolve } from 'node:path'
import { generateModel } from './generate-model.ts'
import { isPresetName } from './presets.ts'

/**
 * Generates `models/<preset>` when it is missing (DESIGN.md §2: the tiny model is made on first
 * use, never downloaded or committed). Any other missing directory is left for the loader to
 * report. Returns true when it generated.
 */
export async function ensureGeneratedModel(dir: string, log: (line: string) => void = () => {}): Promise<boolean> {
  const name = basename(resolve(dir))
  if (existsSync(`${dir}/model.onnx`) || basename(dirname(resolve(dir))) !== 'models' || !isPresetName(name)) return false
  log(`model ${dir} is missing: generating the "${name}" preset`)
  await generateModel({ preset: name, outDir: dir })
  return true
}
