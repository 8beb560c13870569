import { existsSync } from 'node:fs'
import { execFileSync } from 'node:child_process'

/** Tests run on generated models: make sure the tiny ones exist before any test file starts. */
const GENERATOR = 'gpu-node/src/model/generate/cli.ts'

export default function setup(): void {
  if (!existsSync(GENERATOR)) return
  for (const [preset, dir] of [['tiny', 'models/tiny'], ['tiny-llama', 'models/tiny-llama']] as const) {
    if (existsSync(`${dir}/model.onnx`)) continue
    execFileSync(process.execPath, ['--import', 'tsx', GENERATOR, '--preset', preset, '--out', dir], { stdio: 'inherit' })
  }
}
