import { basename, dirname, resolve } from 'node:path'
import { generateModel, isCurrentGeneratedModel } from './generate-model.ts'
import { isPresetName } from './presets.ts'

/**
 * Generates `models/<preset>` when it is missing or was made by another generator version
 * (DESIGN.md §2: the tiny model is made on first use, never downloaded or committed). Any other
 * directory is left alone, for the loader to use or report. Returns true when it generated.
 */
export async function ensureGeneratedModel(dir: string, log: (line: string) => void = () => {}): Promise<boolean> {
  const name = basename(resolve(dir))
  if (basename(dirname(resolve(dir))) !== 'models' || !isPresetName(name) || isCurrentGeneratedModel(dir)) return false
  log(`model ${dir} is missing or stale: generating the "${name}" preset`)
  await generateModel({ preset: name, outDir: dir })
  return true
}
