/**
 * The processes the HTTP scenarios start: a GPU node (optionally with the event-loop-delay
 * probe preloaded), the Node edge, wrangler dev, the Upstash bridge over a throwaway
 * redis-server, and the instant upstream. All on 127.0.0.1, on ports the OS picks, stopped when
 * the scenario (or the run) ends.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { freePort, startRedis, type RedisProcess } from '../../infra/local/redis-process.ts'
import { DEFAULT_EDGE_KIND, type EdgeKind } from '../../infra/local/stack-config.ts'
import { MALLOC_ENV, spawnProc, waitUntil, type Proc } from './procs.ts'

const TSX = ['--import', 'tsx']
const ELD_PROBE = pathToFileURL(join(import.meta.dirname, '..', 'probe', 'event-loop-delay.ts')).href

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
      const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })
      return res.text()
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
  /** A bundle of the entry (bench/lib/bundle.ts) to run instead of the TypeScript through tsx. */
  bundle?: string
  /** Modules imported after tsx, before the entry (bench probes written in TypeScript). */
  preload?: string[]
}

function spawnProxy(name: string, args: string[], env: Record<string, string>, opts: ProxyProcOptions): Proc {
  const wrap = opts.wrap ?? []
  const [command, ...rest] = wrap.length ? [wrap[0]!, ...wrap.slice(1), process.execPath] : [process.execPath]
  const preload = (opts.preload ?? []).flatMap((m) => ['--import', m])
  const script = opts.bundle ? [opts.bundle, ...args.slice(1)] : [...TSX, ...preload, ...args]
  return spawnProc(name, command!, [...rest, ...(opts.nodeArgs ?? []), ...script], { env, ...(opts.cpus ? { cpus: opts.cpus } : {}) })
}

/** The Node edge (edge/src/entries/node.ts) with the given edge environment. */
export async function startNodeEdge(env: Record<string, string>, opts: ProxyProcOptions = {}): Promise<EdgeProc> {
  const port = await freePort()
  const proc = spawnProxy('node-edge', ['edge/src/entries/node.ts'], { ...env, HOST: '127.0.0.1', PORT: String(port) }, opts)
  await proc.waitFor((_l, j) => j?.msg === 'edge listening', opts.readyTimeoutMs ?? 60_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  return { url: `http://127.0.0.1:${port}`, proc, stop: () => proc.stop() }
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
  /** A wrangler config other than the repo's (the bare proxy Worker, bench/probe/bare-worker/). */
  config?: string
  name?: string
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
      ? [...TSX, 'infra/local/miniflare-edge-cli.ts', ...common, '--no-watch']
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

/** The bench-only instant upstream (probe/instant-upstream.ts). */
export async function startInstantUpstream(opts: { cpus?: string } = {}): Promise<EdgeProc> {
  const proc = spawnProc('instant-upstream', process.execPath, [...TSX, 'bench/probe/instant-upstream.ts'], { ...(opts.cpus ? { cpus: opts.cpus } : {}) })
  const ready = await proc.waitFor((_l, j) => j?.msg === 'ready', 60_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  return { url: String(ready.json!.url), proc, stop: () => proc.stop() }
}

/** The bench-only bare Hono passthrough (probe/bare-hono-passthrough.ts) in front of `upstreamUrl`. */
export async function startBarePassthrough(upstreamUrl: string, opts: ProxyProcOptions & { h2?: boolean } = {}): Promise<EdgeProc> {
  const proc = spawnProxy(opts.h2 ? 'bare-hono-passthrough-h2' : 'bare-hono-passthrough', ['bench/probe/bare-hono-passthrough.ts'], { UPSTREAM_URL: upstreamUrl, PORT: '0', ...(opts.h2 ? { UPSTREAM_H2: '1' } : {}) }, opts)
  const ready = await proc.waitFor((_l, j) => j?.msg === 'ready', opts.readyTimeoutMs ?? 60_000).catch(async (e) => {
    await proc.stop()
    throw e
  })
  return { url: String(ready.json!.url), proc, stop: () => proc.stop() }
}
