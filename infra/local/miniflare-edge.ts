/**
 * The local Workers edge on Miniflare's API directly, with wrangler's config semantics: the bundle
 * from wrangler's own build (`wrangler deploy --dry-run --outdir`, what a deploy would upload),
 * bindings, [vars], compatibility date and flags from wrangler.toml through wrangler's
 * `unstable_getMiniflareWorkerOptions`, the env file on top of [vars] as `--env-file` does, and a
 * rebuild when the sources change.
 *
 * Why not wrangler's dev engine (wrangler-dev.ts): it puts wrangler's ProxyWorker, a second
 * workerd, in front of the Worker, and every request crosses that HTTP/1.1 hop; at 64 concurrent
 * streams a Worker that only proxies reached 0.4–1.2 s TTFB p99 under it and at or below the
 * node's own p99 under Miniflare alone (edge/README.md "wrangler dev and streams").
 *
 * `request.cf`: Miniflare reads CLOUDFLARE_CF_FETCH_ENABLED / CLOUDFLARE_CF_FETCH_PATH itself, as
 * under wrangler dev (FACTS.md). The Worker's console output is workerd's stdout/stderr, which
 * Miniflare passes to this process's.
 */
import { execFile } from 'node:child_process'
import { createRequire } from 'node:module'
import { mkdtempSync, readdirSync, readFileSync, rmSync, watch, type FSWatcher } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, extname, join, resolve } from 'node:path'
import { promisify } from 'node:util'
import { parseEnv } from 'node:util'
import { z } from 'zod'
import { LocalEdgeOptions } from './local-edge.ts'

export const DEFAULT_V8_FLAGS = ['--optimize-for-size'] as const

/** Without persistTo no local state is kept. */
export const MiniflareEdgeOptions = LocalEdgeOptions.extend({
  /** Folders whose changes trigger a rebuild (relative to the working directory). */
  watchDirs: z.array(z.string().min(1)).default(['edge/src', 'shared/src']),
  /** workerd's V8 inspector (attach DevTools for CPU profiles or heap snapshots); off by default, as it costs every request. */
  inspectorPort: z.coerce.number().int().min(1).max(65535).optional(),
  /**
   * V8 flags for workerd (workerd-v8-flags.ts). `--optimize-for-size` by default: without it
   * workerd's memory grows under sustained load and is never given back (edge/README.md "The
   * local Workers edge's memory under sustained load"). Read when workerd starts: one set per
   * process.
   */
  v8Flags: z.array(z.string().regex(/^--[a-z0-9-]+(=\S+)?$/)).default([...DEFAULT_V8_FLAGS]),
})
export type MiniflareEdgeOptions = z.infer<typeof MiniflareEdgeOptions>

export interface MiniflareEdge {
  url: string
  /** What its last (re)start ran as workerd: the flags wrapper, or workerd itself when given no flags. */
  readonly workerdPath: string
  dispose(): Promise<void>
}

const run = promisify(execFile)

/** The workerd binary Miniflare runs by default (its `workerd` dependency's). */
function miniflaresWorkerd(): string {
  const fromMiniflare = createRequire(createRequire(import.meta.url).resolve('miniflare'))
  const path = (fromMiniflare('workerd') as { default?: unknown }).default
  if (typeof path !== 'string') throw new Error("miniflare edge: miniflare's workerd package names no binary")
  return path
}

/**
 * Miniflare starts workerd from MINIFLARE_WORKERD_PATH when set, with this process's environment:
 * the wrapper that gives it `flags` (workerd-v8-flags.sh), or workerd itself when there are none.
 * A workerd of the user's own in MINIFLARE_WORKERD_PATH is the one the wrapper runs.
 */
function useV8Flags(flags: readonly string[]): string {
  const wrapper = join(import.meta.dirname, 'workerd-v8-flags.sh')
  const chosen = process.env.MINIFLARE_WORKERD_PATH
  const workerd = chosen && chosen !== wrapper ? chosen : (process.env.ZL_WORKERD_PATH ?? miniflaresWorkerd())
  process.env.ZL_WORKERD_PATH = workerd
  process.env.ZL_WORKERD_V8_FLAGS = flags.join(' ')
  process.env.MINIFLARE_WORKERD_PATH = flags.length > 0 ? wrapper : workerd
  return process.env.MINIFLARE_WORKERD_PATH
}

/** wrangler's production build of the Worker into `outDir`: worker.js and its text modules. */
async function buildWithWrangler(configPath: string, outDir: string, signal: AbortSignal): Promise<void> {
  rmSync(outDir, { recursive: true, force: true })
  const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin/wrangler.js')
  await run(process.execPath, [wrangler, 'deploy', '--dry-run', '--config', configPath, '--outdir', outDir], {
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false' },
    maxBuffer: 16 << 20,
    signal,
  })
}

/**
 * The built modules as Miniflare wants them. wrangler names each extra module by content hash +
 * file name, so its globs (`**\/page/index.html`) no longer match the output's names: the type
 * comes from the extension, and every extra module of this Worker is a Text rule (wrangler.toml);
 * anything else stops the start rather than load as the wrong type.
 */
function builtModules(outDir: string, main: string) {
  return readdirSync(outDir)
    .filter((f) => f !== 'README.md' && !f.endsWith('.map'))
    .map((f) => {
      const path = join(outDir, f)
      if (f === main) return { type: 'ESModule' as const, path, contents: readFileSync(path) }
      if (['.html', '.css', '.js', '.txt'].includes(extname(f))) return { type: 'Text' as const, path, contents: readFileSync(path, 'utf8') }
      throw new Error(`miniflare edge: no module type for built file ${f}`)
    })
    .sort((a, b) => (a.type === 'ESModule' ? -1 : b.type === 'ESModule' ? 1 : 0))
}

export async function startMiniflareEdge(input: z.input<typeof MiniflareEdgeOptions>): Promise<MiniflareEdge> {
  const o = MiniflareEdgeOptions.parse(input)
  const configPath = resolve(o.config)
  // Loaded here, not at module load: wrangler's module takes seconds to import.
  const [{ unstable_getMiniflareWorkerOptions }, { Miniflare }] = await Promise.all([import('wrangler'), import('miniflare')])
  const outDir = join(mkdtempSync(join(tmpdir(), 'zl-miniflare-edge-')), 'out')
  // Ends a build still running when the edge is disposed (a rebuild a last change started).
  const disposed = new AbortController()
  let workerdPath = ''

  const options = async () => {
    await buildWithWrangler(configPath, outDir, disposed.signal)
    const { workerOptions, main } = unstable_getMiniflareWorkerOptions(configPath)
    const envVars = parseEnv(readFileSync(o.envFile, 'utf8'))
    if (!main) throw new Error(`miniflare edge: ${configPath} names no main`)
    // wrangler names the bundle after the entry: worker.ts → worker.js.
    const mainName = basename(main).replace(/\.[cm]?[jt]sx?$/, '.js')
    const { modulesRules: _rules, ...rest } = workerOptions
    // Set again before every (re)start: workerd reads them from this process's environment.
    workerdPath = useV8Flags(o.v8Flags)
    return {
      host: o.ip,
      port: o.port,
      ...(o.inspectorPort ? { inspectorPort: o.inspectorPort } : {}),
      ...(o.persistTo ? { defaultPersistRoot: o.persistTo } : {}),
      workers: [
        {
          ...rest,
          name: 'edge',
          modules: builtModules(outDir, mainName),
          modulesRoot: outDir,
          bindings: { ...(rest.bindings ?? {}), ...envVars },
        },
      ],
    }
  }

  const mf = new Miniflare(await options())
  const url = await mf.ready
  let watchers: FSWatcher[] = []
  if (o.watch) {
    // One rebuild at a time; changes during a rebuild ask for one more after it.
    let building: Promise<void> | undefined
    let again = false
    const rebuild = () => {
      if (building) {
        again = true
        return
      }
      building = (async () => {
        do {
          again = false
          try {
            await mf.setOptions(await options())
            process.stderr.write('miniflare edge: rebuilt\n')
          } catch (e) {
            if (!disposed.signal.aborted) process.stderr.write(`miniflare edge: rebuild failed: ${(e as Error).message.split('\n')[0]}\n`)
          }
        } while (again)
        building = undefined
      })()
    }
    watchers = [...o.watchDirs.map((d) => resolve(d)), configPath, o.envFile].map((p) => watch(p, { recursive: true }, rebuild))
  }
  return {
    url: url.origin,
    get workerdPath() {
      return workerdPath
    },
    dispose: async () => {
      for (const w of watchers) w.close()
      disposed.abort()
      await mf.dispose()
      rmSync(dirname(outDir), { recursive: true, force: true })
    },
  }
}
