/**
 * npx tsx gpu-node/tools/generate-model/cli.ts --preset <name> [--out DIR] [--seed N] [--kv-cache concat|slots] [--external-data]
 * Generates a seeded model directory (default models/<preset>). `--kv-cache concat` makes the
 * Optimum-interface variant of a preset (for A/B probes; see cache-attention-graph.ts).
 * `--external-data` writes the weights to model.onnx_data beside model.onnx (external-data.ts).
 * Imports stay light; all work happens in main().
 */

import { parseArgs } from 'node:util'
import { EXTERNAL_DATA_FILE, generateModel } from './generate-model.ts'
import { DEFAULT_SEED, isPresetName, PRESETS } from './presets.ts'

const USAGE = `usage: cli.ts --preset <${Object.keys(PRESETS).join('|')}> [--out DIR] [--seed N] [--kv-cache concat|slots] [--external-data]`

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { preset: { type: 'string' }, out: { type: 'string' }, seed: { type: 'string' }, 'kv-cache': { type: 'string' }, 'external-data': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  })
  if (values.help) return void console.log(USAGE)
  const preset = values.preset
  if (preset === undefined || !isPresetName(preset)) throw new Error(`unknown or missing --preset\n${USAGE}`)
  const seed = values.seed === undefined ? DEFAULT_SEED : Number(values.seed)
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`--seed must be an integer in [0, 2^32)\n${USAGE}`)
  const kvCache = values['kv-cache']
  if (kvCache !== undefined && kvCache !== 'concat' && kvCache !== 'slots') throw new Error(`--kv-cache must be concat or slots\n${USAGE}`)
  // A variant never lands in models/<preset>: ensure-model.ts would keep it as current.
  if (kvCache !== undefined && values.out === undefined) throw new Error(`--kv-cache needs --out\n${USAGE}`)
  const outDir = values.out ?? `models/${preset}`

  const started = performance.now()
  console.log(`generating ${preset} (seed ${seed}) into ${outDir}`)
  const externalData = values['external-data'] === true
  const { modelBytes, externalDataBytes } = await generateModel({ preset, outDir, seed, externalData, ...(kvCache ? { kvCache } : {}), onProgress: (m) => console.log(`  ${m}`) })
  const seconds = ((performance.now() - started) / 1000).toFixed(1)
  const data = externalData ? ` + ${EXTERNAL_DATA_FILE}: ${megabytes(externalDataBytes)}` : ''
  console.log(`wrote ${outDir}/model.onnx: ${megabytes(modelBytes)}${data} in ${seconds} s`)
}

const megabytes = (bytes: number): string => `${(bytes / 1e6).toFixed(bytes < 1e5 ? 3 : 1)} MB`

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err)
  process.exit(1)
})
