/**
 * transformers.js, the library a Node.js user would pick instead of a serving engine, installed
 * on demand for the engine section's side-by-side (scenarios/engine-peer.ts), the way the edge
 * section installs nginx: pinned, outside the product's dependencies (bench/.peers/, ignored by
 * git). onnxruntime-node's install script (which fetches GPU binaries) is skipped, as the
 * product's .npmrc skips it: the CPU binary ships in the package.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export const TRANSFORMERS_JS_VERSION = '4.3.1'
const ROOT = join(import.meta.dirname, '..', '.peers', `transformers-js-${TRANSFORMERS_JS_VERSION}`)

/** The folder whose node_modules holds @huggingface/transformers at the pinned version. */
export function ensureTransformersJs(log: (line: string) => void): string {
  const pkg = join(ROOT, 'node_modules', '@huggingface', 'transformers', 'package.json')
  if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { version: string }).version === TRANSFORMERS_JS_VERSION) return ROOT
  log(`installing @huggingface/transformers@${TRANSFORMERS_JS_VERSION} into ${ROOT}`)
  mkdirSync(ROOT, { recursive: true })
  writeFileSync(join(ROOT, 'package.json'), `${JSON.stringify({ private: true, dependencies: { '@huggingface/transformers': TRANSFORMERS_JS_VERSION } }, null, 2)}\n`)
  writeFileSync(join(ROOT, '.npmrc'), 'onnxruntime-node-install=skip\nfund=false\naudit=false\n')
  const r = spawnSync('npm', ['install', '--ignore-scripts', '--no-package-lock'], { cwd: ROOT, encoding: 'utf8', timeout: 600_000 })
  if (r.status !== 0) throw new Error(`npm install @huggingface/transformers@${TRANSFORMERS_JS_VERSION} failed: ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' ')}`)
  return ROOT
}
