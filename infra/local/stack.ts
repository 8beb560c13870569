/**
 * `npm start`: redis-server → Upstash bridge → GPU nodes (one per region, or `nodesPerRegion`) → edge, each a child
 * process under the Supervisor, started in that order, each waited on until it answers.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { join } from 'node:path'
import { Redis } from '@upstash/redis'
import { seedKey } from '../keys/key-admin.ts'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { ensureDebianTools } from './debian-packages.ts'
import { RespConnection } from './redis-client.ts'
import { findRedisServer } from './redis-process.ts'
import { bridgeUrl, edgeEnv, LOCAL, nodeEnv, portPlan, stackNodes, type EdgeKind, type PortPlan, type StackNode, type StackOptions } from './stack-config.ts'
import { Supervisor, type ServiceSpec, type SupervisorEvents } from './supervisor.ts'
import { startWanLinks, type WanLinks } from './stack-wan.ts'
import { buildNodeEdge } from '../build/edge-node.ts'

const STATE_DIR = '.stack'
const TSX = ['--import', 'tsx']
/** What launch-gpu-node.mjs sets for `npm run gpu-node` (glibc reads MALLOC_* only at process start). */
const NODE_MALLOC_ENV = { MALLOC_MMAP_MAX_: '0', MALLOC_TRIM_THRESHOLD_: '68719476736' }

export interface RunningStack {
  supervisor: Supervisor
  edgeUrl: string
  /** The ports in use (the fixed local ones unless StackOptions.ports says otherwise). */
  ports: PortPlan
  /** Supervisor service name of each region's (first) GPU node: `gpu-node-<region>`. */
  nodeService(region: string): string
  /** Every GPU node's service name (`gpu-node-<region>`, `gpu-node-<region>-2`, …). */
  nodeServices: string[]
  /** The WAN relays between the edge and other regions' nodes (none without `opts.wan`). */
  wan: WanLinks
  /** The options the stack runs with: the caller's, plus the node URLs the WAN relays put in front. */
  opts: StackOptions
  stop(): Promise<void>
}

export async function startStack(opts: StackOptions, events: SupervisorEvents): Promise<RunningStack> {
  const redisBin = ensureRedisInstalled(events)
  const nodes = stackNodes(opts)
  const ports = portPlan(opts)
  const stateDir = opts.stateDir ?? STATE_DIR
  await assertPortsFree([ports.redis, ports.bridge, ...nodes.map((n) => n.port), ports.edge])
  if (await ensureGeneratedModel(opts.modelDir)) events.status(`generated ${opts.modelDir}`)

  const wan = await startWanLinks(opts.wan, nodes, LOCAL.host)
  for (const line of wan.describe()) events.status(`WAN: ${line}`)
  // From here on the nodes publish, and the edge dials, the relays' URLs.
  opts = { ...opts, nodeUrls: Object.fromEntries(wan.links.map((l) => [l.nodeId, l.relay.url])) }
  const supervisor = new Supervisor(join(stateDir, 'logs'), events)
  const stop = () => supervisor.stopAll().finally(() => wan.close())
  try {
    events.status(`starting redis-server on ${LOCAL.host}:${ports.redis}`)
    await supervisor.start(redisSpec(redisBin, ports.redis, stateDir))
    events.status(`starting the Upstash bridge on ${LOCAL.host}:${ports.bridge}`)
    await supervisor.start(bridgeSpec(ports))
    await seedKey(new Redis({ url: bridgeUrl(opts), token: LOCAL.upstashToken }), opts.devApiKey, { tenant: 'dev', name: 'local dev key', id: 'key_dev' })
    for (const n of nodes) {
      events.status(`starting GPU node ${n.id} (${n.region.name}) on ${LOCAL.host}:${n.port} (${opts.modelDir})`)
      await supervisor.start(nodeSpec(opts, n))
    }
    events.status(`starting ${EDGE_DESCRIPTION[opts.edge]} on ${LOCAL.host}:${ports.edge}`)
    await supervisor.start(opts.edge === 'node' ? nodeEdgeSpec(opts, await buildNodeEdge(join(stateDir, 'edge-node'))) : wranglerSpec(opts, stateDir))
  } catch (e) {
    await stop()
    throw e
  }
  return { supervisor, edgeUrl: `http://${LOCAL.host}:${ports.edge}`, ports, nodeService: nodeServiceName, nodeServices: nodes.map((n) => n.service), wan, opts, stop }
}

function nodeServiceName(region: string): string {
  return `gpu-node-${region}`
}

function redisSpec(binary: string, port: number, stateDir: string): ServiceSpec {
  const dir = join(stateDir, 'redis')
  mkdirSync(dir, { recursive: true })
  return {
    name: 'redis',
    command: binary,
    args: ['--port', String(port), '--bind', LOCAL.host, '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'],
    ready: () => redisAnswers(port),
    critical: true,
  }
}

function bridgeSpec(ports: PortPlan): ServiceSpec {
  return {
    name: 'upstash-bridge',
    command: process.execPath,
    args: [...TSX, 'infra/local/upstash-bridge-cli.ts'],
    env: { BRIDGE_HOST: LOCAL.host, BRIDGE_PORT: String(ports.bridge), REDIS_URL: `redis://${LOCAL.host}:${ports.redis}`, UPSTASH_TOKEN: LOCAL.upstashToken },
    ready: () => httpAnswers(`http://${LOCAL.host}:${ports.bridge}/`, { method: 'POST', headers: { authorization: `Bearer ${LOCAL.upstashToken}` }, body: '["PING"]' }),
    critical: true,
  }
}

/**
 * The node process itself (not `npm run gpu-node`'s launcher), with the launcher's malloc
 * environment: the supervisor's pid is then the node's, so a SIGKILL (a test's region outage, or
 * the supervisor's own stop) ends the node instead of orphaning it on its port.
 */
function nodeSpec(opts: StackOptions, n: StackNode): ServiceSpec {
  return {
    name: n.service,
    command: process.execPath,
    args: [...TSX, 'gpu-node/src/main.ts'],
    env: { ...nodeEnv(opts, n), ...NODE_MALLOC_ENV },
    ready: () => httpAnswers(`http://${LOCAL.host}:${n.port}/readyz`),
    // As the edge's: a fresh clone's first start transpiles the node's sources, and several nodes
    // doing so at once beside a loaded test run took past 60 s on 2 cores.
    readyTimeoutMs: 120_000,
    critical: false,
    ...(opts.nodeNice ? { nice: opts.nodeNice } : {}),
  }
}

/** What each edge kind is, in the stack's status lines and banner. */
export const EDGE_DESCRIPTION: Record<EdgeKind, string> = {
  miniflare: "the Workers edge on Miniflare directly (workerd, wrangler's build and wrangler.toml, no ProxyWorker hop)",
  wrangler: "the edge under wrangler's dev engine (workerd behind wrangler's ProxyWorker, DevTools inspector off)",
  'wrangler-inspector': 'the edge under wrangler dev with its DevTools inspector (concurrent streams stall: edge/README.md)',
  node: 'the Node edge',
}

function wranglerSpec(opts: StackOptions, stateDir: string): ServiceSpec {
  const { edge, inspector } = portPlan(opts)
  const envFile = join(stateDir, 'edge.env')
  // Single quotes: wrangler's env-file parser keeps backslash escapes inside double quotes, which
  // would corrupt the JSON in GPU_NODES. None of the values contains a single quote.
  writeFileSync(envFile, Object.entries(edgeEnv(opts)).map(([k, v]) => `${k}='${v}'`).join('\n') + '\n')
  const noWatch = opts.edgeWatch === false ? ['--no-watch'] : []
  return {
    name: 'edge',
    command: process.execPath,
    // `--log-level log`: wrangler prints the Worker's console.log (the edge's request log lines)
    // only at its `log` level or above; at `warn` they were dropped before reaching edge.log.
    // `log` also brings wrangler's own `[wrangler:info]` lines (method, path, status).
    // The default kind is Miniflare directly (miniflare-edge.ts: no ProxyWorker hop); `wrangler`
    // is wrangler's dev engine without the inspector (wrangler-dev.ts: with it, concurrent streams
    // stall); `wrangler-inspector` is plain `wrangler dev`, for a debugger.
    args:
      opts.edge === 'wrangler-inspector'
        ? [
            'node_modules/wrangler/bin/wrangler.js', 'dev', '--ip', LOCAL.host, '--port', String(edge), '--env-file', envFile, '--show-interactive-dev-session=false', '--log-level', 'log',
            ...(inspector !== undefined ? ['--inspector-port', String(inspector)] : []),
          ]
        : opts.edge === 'miniflare'
          ? // wrangler dev's local state folder; the Worker's console output is Miniflare's stdout.
            [...TSX, 'infra/local/miniflare-edge-cli.ts', '--ip', LOCAL.host, '--port', String(edge), '--env-file', envFile, '--persist-to', join('.wrangler', 'state', 'v3'), ...noWatch]
          : [...TSX, 'infra/local/wrangler-dev-cli.ts', '--ip', LOCAL.host, '--port', String(edge), '--env-file', envFile, '--log-level', 'log', ...noWatch],
    // Offline: no cf fetch, no telemetry (FACTS.md).
    env: { CLOUDFLARE_CF_FETCH_ENABLED: 'false', WRANGLER_SEND_METRICS: 'false' },
    ready: () => httpAnswers(`http://${LOCAL.host}:${edge}/healthz`),
    readyTimeoutMs: 120_000,
    critical: true,
  }
}

/** The Node edge as `npm run edge:node` runs it: `module`, built by infra/build/edge-node.ts into this stack's state folder. */
function nodeEdgeSpec(opts: StackOptions, module: string): ServiceSpec {
  const { edge } = portPlan(opts)
  return {
    name: 'edge',
    command: process.execPath,
    args: [module],
    env: { ...edgeEnv(opts), HOST: LOCAL.host, PORT: String(edge) },
    ready: () => httpAnswers(`http://${LOCAL.host}:${edge}/healthz`),
    critical: true,
  }
}

/** redis-server from Debian: installed when missing and running as root, else a clear instruction. */
function ensureRedisInstalled(events: SupervisorEvents): string {
  return ensureDebianTools([{ package: 'redis-server', find: () => findRedisServer() }], events.status)[0]!
}

async function assertPortsFree(ports: number[]): Promise<void> {
  for (const port of ports) {
    const inUse = await new Promise<boolean>((resolve) => {
      const socket = net.connect({ host: LOCAL.host, port })
      socket.once('connect', () => {
        socket.destroy()
        resolve(true)
      })
      socket.once('error', () => resolve(false))
    })
    if (inUse) throw new Error(`port ${LOCAL.host}:${port} is already in use: is another stack running? (\`ss -ltnp | grep ${port}\` shows who has it)`)
  }
}

async function redisAnswers(port: number): Promise<boolean> {
  const conn = await RespConnection.connect({ host: LOCAL.host, port }, 500)
  try {
    return (await conn.send(['PING'])) === 'PONG'
  } finally {
    conn.close()
  }
}

async function httpAnswers(url: string, init: RequestInit = {}): Promise<boolean> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(2000) })
  await res.body?.cancel()
  return res.ok
}
