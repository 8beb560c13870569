/**
 * A TypeScript entry bundled into one ES module for a process that runs under valgrind: loading
 * it through tsx there (its loader hooks, hundreds of modules resolved one by one, each ×50
 * slower under callgrind) took 3+ minutes before the first request, where the bundle loads in
 * seconds. The code that serves requests is the same functions either way; `import.meta.url` is
 * pinned to the entry's own directory tree so files read relative to a module (the dashboard's
 * assets) resolve as they do unbundled.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'

const ROOT = join(import.meta.dirname, '..', '..')

/**
 * Bundles `entry` (relative to the repository root) to `outFile`. `metaUrlOf`: the module whose
 * import.meta.url the bundle's modules see (default: the entry).
 */
export function bundleEntry(entry: string, outFile: string, metaUrlOf: string = entry): string {
  const esbuild = createRequire(join(ROOT, 'package.json')).resolve('esbuild/bin/esbuild')
  const metaUrl = pathToFileURL(join(ROOT, metaUrlOf)).href
  mkdirSync(dirname(outFile), { recursive: true })
  const r = spawnSync(esbuild, [
    join(ROOT, entry), '--bundle', '--platform=node', '--format=esm', '--target=node20', `--outfile=${outFile}`, '--log-level=warning',
    `--define:import.meta.url=${JSON.stringify(metaUrl)}`,
    // CommonJS dependencies inside an ES module bundle call require(): give them one.
    `--banner:js=import { createRequire as __zlRequire } from 'node:module'; const require = __zlRequire(${JSON.stringify(metaUrl)});`,
  ], { encoding: 'utf8', timeout: 120_000 })
  if (r.status !== 0) throw new Error(`esbuild ${entry} failed: ${(r.stderr || r.stdout).trim().slice(0, 500)}`)
  return outFile
}
