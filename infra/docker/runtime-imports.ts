/**
 * The files and packages the GPU node loads at run time, found by following its imports from an
 * entry file: static imports and re-exports, dynamic import() of a literal, and module URLs built
 * with `new URL('./x.ts', import.meta.url)` (how the model runner names its worker's entry).
 * Type-only imports are skipped: tsx erases them. Used to check that the image copies every file
 * the node loads and that `npm ci --omit=dev` installs every package it loads.
 */
import { existsSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'

export interface RuntimeGraph {
  /** Repository-relative paths of every module reached. */
  files: string[]
  /** Package names of every bare specifier reached (node: built-ins excluded). */
  packages: string[]
}

const STATIC = /(?:^|[\n;])\s*(import|export)\s+(type\s+)?(?:[\w*{}\s,$]*?\s+from\s+)?['"]([^'"\n]+)['"]/g
const DYNAMIC = /\bimport(?:\.meta\.resolve)?\(\s*['"]([^'"\n]+)['"]\s*\)/g
const MODULE_URL = /new URL\(\s*['"](\.{1,2}\/[^'"\n]+)['"]\s*,\s*import\.meta\.url\s*\)/g

const BUILTINS = new Set(builtinModules)

function packageName(spec: string): string {
  const parts = spec.split('/')
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!
}

export function runtimeGraph(root: string, entries: readonly string[]): RuntimeGraph {
  const files = new Set<string>()
  const packages = new Set<string>()
  const queue = entries.map((e) => resolve(root, e))
  while (queue.length > 0) {
    const file = queue.pop()!
    const rel = relative(root, file)
    if (files.has(rel)) continue
    if (!existsSync(file)) throw new Error(`${rel} is imported but does not exist`)
    files.add(rel)
    // Comments can quote import lines; strip them first (line comments only at line start or after code whitespace).
    const src = readFileSync(file, 'utf8')
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/(^|\s)\/\/.*$/gm, '$1')
    const specs: string[] = []
    for (const m of src.matchAll(STATIC)) if (!m[2]) specs.push(m[3]!)
    for (const m of src.matchAll(DYNAMIC)) specs.push(m[1]!)
    for (const m of src.matchAll(MODULE_URL)) specs.push(m[1]!)
    for (const spec of specs) {
      if (spec.startsWith('.')) queue.push(join(dirname(file), spec))
      else if (spec.startsWith('node:') || BUILTINS.has(spec)) continue
      else packages.add(packageName(spec))
    }
  }
  return { files: [...files].sort(), packages: [...packages].sort() }
}
