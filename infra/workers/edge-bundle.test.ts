/**
 * `wrangler deploy --dry-run --outdir …` for every environment in wrangler.toml: the bundle
 * builds offline, is self-contained (no Node built-ins: the edge deploys without nodejs_compat),
 * stays well under the Workers size limit, and each environment deploys with the compatibility
 * date and flags wrangler.toml declares, as wrangler itself resolves them.
 */
import { execFile } from 'node:child_process'
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { gzipSync } from 'node:zlib'
import { beforeAll, describe, expect, it } from 'vitest'
import { REPO_ROOT } from '../k8s/kustomize.ts'
import { dryRunCommand, dryRunOutdir, readWranglerToml, WRANGLER_ENVS } from './edge-bundle.ts'

/**
 * Cloudflare's Worker size limit after compression: 3 MB on the Free plan (10 MB on Paid). The
 * smaller one, so the edge deploys on either; fail at 75% of it, a margin for growth to be noticed.
 */
const WORKERS_FREE_LIMIT_BYTES = 3_000_000
const MARGIN = 0.75

interface Built {
  env: string
  stdout: string
  /** The files wrangler would upload: the entry and its attached modules (not the source map or README). */
  modules: Array<{ name: string; bytes: number }>
  entry: string
}

async function dryRun(env: string): Promise<Built> {
  const outdir = join(REPO_ROOT, dryRunOutdir(env))
  rmSync(outdir, { recursive: true, force: true })
  // `npx wrangler …` runs node_modules/.bin/wrangler; calling its script directly saves npm's start-up (~1 s).
  const [npx, bin, ...args] = dryRunCommand(env)
  expect([npx, bin]).toEqual(['npx', 'wrangler'])
  const { stdout } = await promisify(execFile)(process.execPath, [join(REPO_ROOT, 'node_modules/wrangler/bin/wrangler.js'), ...args], {
    cwd: REPO_ROOT,
    maxBuffer: 16 << 20,
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CI: 'true' },
  }).catch((e: { stdout?: string; stderr?: string; message: string }) => {
    throw new Error(`${dryRunCommand(env).join(' ')} failed: ${e.stderr || e.stdout || e.message}`)
  })
  const files = readdirSync(outdir).filter((f) => !f.endsWith('.map') && f !== 'README.md')
  return {
    env,
    stdout,
    modules: files.map((name) => ({ name, bytes: statSync(join(outdir, name)).size })),
    entry: readFileSync(join(outdir, 'worker.js'), 'utf8'),
  }
}

/** Wrangler's own summary line, in KiB. */
function reportedUpload(stdout: string): { totalKiB: number; gzipKiB: number } {
  const m = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(stdout)
  if (!m) throw new Error(`no "Total Upload" line in:\n${stdout}`)
  return { totalKiB: Number(m[1]), gzipKiB: Number(m[2]) }
}

describe('edge bundle (wrangler deploy --dry-run)', () => {
  const toml = readWranglerToml()
  let built: Built[]
  let readConfig: (typeof import('wrangler'))['unstable_readConfig']

  beforeAll(async () => {
    expect(WRANGLER_ENVS).toEqual(['production', 'staging'])
    // wrangler's module takes a couple of seconds to load: meanwhile the dry runs build.
    ;[built, { unstable_readConfig: readConfig }] = await Promise.all([Promise.all(WRANGLER_ENVS.map(dryRun)), import('wrangler')])
  }, 120_000)

  it('builds every environment into one self-contained module graph', () => {
    for (const b of built) {
      expect(b.stdout).toContain('--dry-run: exiting now.')
      expect(b.modules.map((m) => m.name)).toContain('worker.js')
      // Every import is an attached module in the same upload: no node:* (no nodejs_compat), no package left external.
      const imports = [...b.entry.matchAll(/^import\s+[\w${}\s,*]*?\s*from\s+"([^"]+)";$/gm)].map((m) => m[1]!)
      expect(imports.length).toBeGreaterThan(0)
      for (const spec of imports) {
        expect(spec, `${b.env}: ${spec}`).toMatch(/^\.\/[^/]+$/)
        expect(b.modules.map((m) => `./${m.name}`), b.env).toContain(spec)
      }
      expect(b.entry).not.toMatch(/\b(?:from|require\()\s*["']node:/)
    }
  })

  it('stays under the Workers size limit with a margin, and reports its size', () => {
    for (const b of built) {
      const { totalKiB, gzipKiB } = reportedUpload(b.stdout)
      const bytes = b.modules.reduce((n, m) => n + m.bytes, 0)
      // Wrangler counts what is on disk: the files we measure are the upload.
      expect(Math.abs(bytes / 1024 - totalKiB)).toBeLessThan(0.02)
      const ourGzip = b.modules.reduce((n, m) => n + gzipSync(readFileSync(join(REPO_ROOT, dryRunOutdir(b.env), m.name))).length, 0)
      const gzipBytes = Math.max(gzipKiB * 1024, ourGzip)
      console.info(`[edge bundle] ${b.env}: ${b.modules.length} modules, ${(bytes / 1024).toFixed(1)} KiB, gzip ${gzipKiB} KiB (wrangler) / ${(ourGzip / 1024).toFixed(1)} KiB (per file); limit ${WORKERS_FREE_LIMIT_BYTES / 1e6} MB compressed, failing above ${((WORKERS_FREE_LIMIT_BYTES * MARGIN) / 1024).toFixed(0)} KiB`)
      expect(gzipBytes, `${b.env}: compressed bundle`).toBeLessThan(WORKERS_FREE_LIMIT_BYTES * MARGIN)
    }
  })

  it('deploys each environment with the compatibility date and flags wrangler.toml declares, as wrangler resolves them', async () => {
    // The newest date the workerd under wrangler (dev and the workers tests) implements, from wrangler's own miniflare.
    const { supportedCompatibilityDate } = createRequire(createRequire(import.meta.url).resolve('wrangler'))('miniflare') as { supportedCompatibilityDate: string }
    for (const env of WRANGLER_ENVS) {
      const resolved = readConfig({ config: join(REPO_ROOT, 'wrangler.toml'), env })
      expect(resolved.name).toBe(toml.env![env]!.name)
      expect(resolved.compatibility_date).toBe(toml.env![env]!.compatibility_date ?? toml.compatibility_date)
      expect(resolved.compatibility_flags).toEqual(toml.env![env]!.compatibility_flags ?? toml.compatibility_flags)
      // The client-disconnect cancel relies on it (DESIGN.md §3); the edge uses no Node APIs.
      expect(resolved.compatibility_flags).toContain('enable_request_signal')
      expect(resolved.compatibility_flags.some((f: string) => f.startsWith('nodejs_compat'))).toBe(false)
      // No DEV_MODE outside local development: it lets clients pick their routing coordinates.
      expect(resolved.vars.DEV_MODE).toBeUndefined()
    }
    // Not newer than that: what the tests run is what deploys.
    expect(toml.compatibility_date <= supportedCompatibilityDate).toBe(true)
  })
})
