/**
 * The processes the HTTP scenarios start: a GPU node (optionally with the event-loop-delay
 * probe preloaded), the Node edge, wrangler dev, the Upstash bridge over a throwaway
 * redis-server, and the instant upstream. All on 127.0.0.1, on ports the OS picks, stopped when
 * the scenario (or the run) ends.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join, relative, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { buildNodeEdge } from '../../infra/build/edge-node.ts'
import { freePort, startRedis, type RedisProcess } from '../../infra/local/redis-process.ts'
import { DEFAULT_EDGE_KIND, type EdgeKind } from '../../infra/local/stack-config.ts'
import { bundleEntry } from './bundle.ts'
import { MALLOC_ENV, spawnProc, waitUntil, type Proc } from './procs.ts'

const ROOT = join(import.meta.dirname, '..', '..')

const TSX = ['--import', 'tsx']
const ELD_PROBE = pathToFileURL(join(import.meta.dirname, '..', 'rig', 'event-loop-delay.ts')).href

export interface EldReading {
  resolutionMs: number
  count: number
  p50: number
  p90: number
  p99: number
  max: number
}

export interface GpuNode {
  url: string
  model: string
  proc: Proc
  metricsText(): Promise<string>
  /** Present when started with `eldProbe`. */
  eld?: { reset(): Promise<void>; read(): Promise<EldReading> }
  stop(): Promise<void>
}

/** Why each retried /metrics GET failed the first time (a bench reports them). */
export const metricsRetries: string[] = []

/** fetch's "fetch failed" with the network error under it. */
export function causeOf(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause
  return [(e as Error).message, cause?.code ?? cause?.message].filter(Boolean).join(': ')
}

export interface GpuNodeOptions {
  modelDir: string
  /** Signed requests only (the edge's secret); else ALLOW_UNSIGNED=1 for direct use. */
  secret?: string
  env?: Record<string, string>
  eldProbe?: boolean
  cpus?: string
  /** Extra node flags (diagnostics, e.g. --cpu-prof). */
  nodeArgs?: string[]
}

export async function startGpuNode(o: GpuNodeOptions): Promise<GpuNode> {
  const env: Record<string, string | undefined> = {
    ...MALLOC_ENV,
    MODEL_DIR: o.modelDir,
    HOST: '127.0.0.1',
    PORT: '0',
    REGION: 'bench',
    NODE_ID: 'bench-node',
    // A benchmark node never heartbeats into anyone's registry.
    UPSTASH_REDIS_REST_URL: undefined,
    UPSTASH_REDIS_REST_TOKEN: undefined,
    EDGE_SHARED_SECRET: o.secret,
    ALLOW_UNSIGNED: o.secret ? undefined : '1',
    ...o.env,
  }
  const args = [...(o.nodeArgs ?? []), ...TSX, ...(o.eldProbe ? ['--import', ELD_PROBE] : []), 'gpu-node/src/main.ts']
  const proc = spawnProc('gpu-node', process.execPath, args, { env, ipc: o.eldProbe, ...(o.cpus ? { cpus: o.cpus } : {}) })
  const ready = await proc.waitFor((_l, j) => j?.msg === 'ready', 120_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  const url = String(ready.json!.url)
  const node: GpuNode = {
    url,
    model: String(ready.json!.model),
    proc,
    async metricsText() {
      const get = async () => (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text()
      // An idempotent GET: one retry when the connection fails (the cause is kept if it fails again).
      return get().catch((e: unknown) => {
        metricsRetries.push(causeOf(e))
        return get()
      })
    },
    stop: () => proc.stop(),
  }
  if (o.eldProbe) {
    let nextId = 1
    const ask = <T>(type: string): Promise<T> => {
      const id = nextId++
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('event-loop-delay probe: no answer')), 10_000)
        const onMsg = (m: { id?: number } & T) => {
          if (m?.id !== id) return
          clearTimeout(timer)
          proc.child.off('message', onMsg)
          resolve(m)
        }
        proc.child.on('message', onMsg)
        proc.child.send({ type, id })
      })
    }
    node.eld = { reset: async () => void (await ask('eld-reset')), read: () => ask<EldReading>('eld-read') }
  }
  return node
}

export interface LocalUpstashProcs {
  restUrl: string
  restToken: string
  redis: RedisProcess
  bridge: Proc
  stop(): Promise<void>
}

/** redis-server (free port) plus the Upstash bridge as its own process (DESIGN.md §9). */
export async function startUpstashProcs(opts: { cpus?: string } = {}): Promise<LocalUpstashProcs> {
  const restToken = 'zl-bench-upstash-token'
  const redis = await startRedis({ port: 0 })
  const port = await freePort()
  const bridge = spawnProc('upstash-bridge', process.execPath, [...TSX, 'infra/local/upstash-bridge-cli.ts'], {
    env: { BRIDGE_HOST: '127.0.0.1', BRIDGE_PORT: String(port), REDIS_URL: redis.url, UPSTASH_TOKEN: restToken },
    ...(opts.cpus ? { cpus: opts.cpus } : {}),
  })
  const restUrl = `http://127.0.0.1:${port}`
  try {
    await waitUntil('upstash bridge', async () => {
      const res = await fetch(`${restUrl}/`, { method: 'POST', headers: { authorization: `Bearer ${restToken}` }, body: '["PING"]', signal: AbortSignal.timeout(2000) })
      return res.ok
    }, 60_000)
  } catch (e) {
    await bridge.stop()
    await redis.stop()
    throw e
  }
  return {
    restUrl,
    restToken,
    redis,
    bridge,
    async stop() {
      await bridge.stop()
      await redis.stop()
    },
  }
}

export interface EdgeProc {
  url: string
  proc: Proc
  /** The built module it runs (undefined: the TypeScript sources through tsx); the Node edge's has its source map beside it. */
  module?: string
  stop(): Promise<void>
}

/** How a proxy under test is started: pinned, under a wrapper (valgrind), with node flags. */
export interface ProxyProcOptions {
  cpus?: string
  nodeArgs?: string[]
  /** A command the node process runs under (e.g. valgrind and its flags); its pid is the proxy's. */
  wrap?: string[]
  /** How long to wait for it to listen (a wrapped process starts slower). */
  readyTimeoutMs?: number
  /**
   * The module to run. Default: the proxy built as it runs outside the bench (the Node edge by
   * infra/build/edge-node.ts, the bare passthrough by bench/lib/bundle.ts), once per bench process.
   */
  bundle?: string
  /** Run the TypeScript sources through tsx instead (every closure pays tsx's __name: infra/build/edge-node.ts). */
  source?: boolean
  /** Modules imported before the entry (bench probes written in TypeScript; bundled too unless `source`). */
  preload?: string[]
}

const built = new Map<string, Promise<string>>()
/** `make(dir)` once per bench process for `key`, into a folder of its own. */
function buildOnce(key: string, make: (dir: string) => string | Promise<string>): Promise<string> {
  let out = built.get(key)
  if (!out) built.set(key, (out = Promise.resolve(make(mkdtempSync(join(tmpdir(), 'zl-bench-build-'))))))
  return out
}

/** A TypeScript module (a file: URL, or a path absolute or from the repository root) bundled once per bench process. */
function bundledModule(path: string): Promise<string> {
  const entry = relative(ROOT, path.startsWith('file:') ? fileURLToPath(path) : resolve(ROOT, path))
  return buildOnce(entry, (dir) => bundleEntry(entry, join(dir, `${basename(entry, '.ts')}.mjs`)))
}

async function spawnProxy(name: string, args: string[], env: Record<string, string>, opts: ProxyProcOptions & { build: () => Promise<string> }): Promise<{ proc: Proc; module?: string }> {
  const wrap = opts.wrap ?? []
  const [command, ...rest] = wrap.length ? [wrap[0]!, ...wrap.slice(1), process.execPath] : [process.execPath]
  const preloads = await Promise.all((opts.preload ?? []).map((m) => (opts.source ? m : bundledModule(m))))
  const preload = preloads.flatMap((m) => ['--import', m])
  const module = opts.source ? undefined : (opts.bundle ?? (await opts.build()))
  const script = module ? [...preload, module, ...args.slice(1)] : [...TSX, ...preload, ...args]
  const proc = spawnProc(name, command!, [...rest, ...(opts.nodeArgs ?? []), ...script], { env, ...(opts.cpus ? { cpus: opts.cpus } : {}) })
  return { proc, ...(module ? { module } : {}) }
}

/** The Node edge (edge/src/entries/node.ts, built as `npm run edge:node` runs it) with the given edge environment. */
export async function startNodeEdge(env: Record<string, string>, opts: ProxyProcOptions = {}): Promise<EdgeProc> {
  const port = await freePort()
  const build = () => buildOnce('node-edge', buildNodeEdge)
  const { proc, module } = await spawnProxy('node-edge', ['edge/src/entries/node.ts'], { ...env, HOST: '127.0.0.1', PORT: String(port) }, { ...opts, build })
  await proc.waitFor((_l, j) => j?.msg === 'edge listening', opts.readyTimeoutMs ?? 60_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  return { url: `http://127.0.0.1:${port}`, proc, ...(module ? { module } : {}), stop: () => proc.stop() }
}

export interface WranglerDevOptions {
  /**
   * The local Workers set-up, as `npm start --edge` names it (default: npm start's,
   * DEFAULT_EDGE_KIND): `miniflare` (Miniflare's API directly, infra/local/miniflare-edge-cli.ts),
   * `wrangler` (wrangler's dev engine, DevTools inspector off: infra/local/wrangler-dev-cli.ts),
   * `wrangler-inspector` (plain `wrangler dev`, inspector on: the set-up whose concurrent streams
   * stall, edge/README.md).
   */
  kind?: Exclude<EdgeKind, 'node'>
  /** A wrangler config other than the repo's (the bare proxy Worker, bench/rig/bare-worker/). */
  config?: string
  name?: string
  /** `miniflare` only: workerd's V8 flags ([] none); default miniflare-edge.ts's. */
  v8Flags?: readonly string[]
}

/**
 * The local Workers edge offline, as infra/local/stack.ts runs it (env file with single-quoted
 * values): by default the stack's default kind.
 */
export async function startWranglerDev(env: Record<string, string>, opts: WranglerDevOptions = {}): Promise<EdgeProc> {
  const dir = mkdtempSync(join(tmpdir(), 'zl-bench-wrangler-'))
  const envFile = join(dir, 'edge.env')
  for (const [k, v] of Object.entries(env)) if (v.includes("'")) throw new Error(`wrangler env value of ${k} contains a single quote`)
  writeFileSync(envFile, Object.entries(env).map(([k, v]) => `${k}='${v}'`).join('\n') + '\n')
  const port = await freePort()
  const common = ['--ip', '127.0.0.1', '--port', String(port), '--persist-to', join(dir, 'state'), '--env-file', envFile, ...(opts.config ? ['--config', opts.config] : [])]
  const kind = opts.kind ?? DEFAULT_EDGE_KIND
  const args =
    kind === 'miniflare'
      ? [...TSX, 'infra/local/miniflare-edge-cli.ts', ...common, '--no-watch', ...(opts.v8Flags ? [`--v8-flags=${opts.v8Flags.join(' ')}`] : [])]
      : kind === 'wrangler-inspector'
        ? ['node_modules/wrangler/bin/wrangler.js', 'dev', ...common, '--log-level', 'warn', '--inspector-port', String(await freePort()), '--show-interactive-dev-session=false']
        : [...TSX, 'infra/local/wrangler-dev-cli.ts', ...common, '--log-level', 'warn', '--no-watch']
  const proc = spawnProc(opts.name ?? `${kind}-edge`, process.execPath, args, { env: { CLOUDFLARE_CF_FETCH_ENABLED: 'false', WRANGLER_SEND_METRICS: 'false' } })
  const url = `http://127.0.0.1:${port}`
  try {
    await Promise.race([
      waitUntil('wrangler dev', async () => (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) })).status === 200, 120_000, 500),
      proc.exited.then((code) => {
        throw new Error(`wrangler dev exited (code ${code}); last output:\n${proc.tail()}`)
      }),
    ])
  } catch (e) {
    await proc.stop()
    throw e
  }
  return { url, proc, stop: () => proc.stop() }
}

/** The bench-only instant upstream (rig/instant-upstream.ts). */
export async function startInstantUpstream(opts: { cpus?: string } = {}): Promise<EdgeProc> {
  const proc = spawnProc('instant-upstream', process.execPath, [...TSX, 'bench/rig/instant-upstream.ts'], { ...(opts.cpus ? { cpus: opts.cpus } : {}) })
  const ready = await proc.waitFor((_l, j) => j?.msg === 'ready', 60_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  return { url: String(ready.json!.url), proc, stop: () => proc.stop() }
}

/** The bench-only bare Hono passthrough (rig/bare-hono-passthrough.ts) in front of `upstreamUrl`. */
export async function startBarePassthrough(upstreamUrl: string, opts: ProxyProcOptions & { h2?: boolean } = {}): Promise<EdgeProc> {
  const entry = 'bench/rig/bare-hono-passthrough.ts'
  const { proc, module } = await spawnProxy(opts.h2 ? 'bare-hono-passthrough-h2' : 'bare-hono-passthrough', [entry], { UPSTREAM_URL: upstreamUrl, PORT: '0', ...(opts.h2 ? { UPSTREAM_H2: '1' } : {}) }, { ...opts, build: () => bundledModule(entry) })
  const ready = await proc.waitFor((_l, j) => j?.msg === 'ready', opts.readyTimeoutMs ?? 60_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  return { url: String(ready.json!.url), proc, ...(module ? { module } : {}), stop: () => proc.stop() }
}
