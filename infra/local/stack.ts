/**
 * `npm start`: redis-server → Upstash bridge → GPU nodes (one per region) → edge, each a child
 * process under the Supervisor, started in that order, each waited on until it answers.
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { join } from 'node:path'
import { Redis } from '@upstash/redis'
import { seedKey } from '../keys/key-admin.ts'
import { ensureGeneratedModel } from '../../gpu-node/src/model/generate/ensure-model.ts'
import { RespConnection } from './redis-client.ts'
import { findRedisServer } from './redis-process.ts'
import { edgeEnv, edgePort, LOCAL, nodeEnv, regionsFor, type StackOptions } from './stack-config.ts'
import { Supervisor, type ServiceSpec, type SupervisorEvents } from './supervisor.ts'

const STATE_DIR = '.stack'
const TSX = ['--import', 'tsx']

export interface RunningStack {
  supervisor: Supervisor
  edgeUrl: string
  stop(): Promise<void>
}

export async function startStack(opts: StackOptions, events: SupervisorEvents): Promise<RunningStack> {
  const redisBin = ensureRedisInstalled(events)
  const regions = regionsFor(opts.regions)
  const port = edgePort(opts)
  await assertPortsFree([LOCAL.redisPort, LOCAL.bridgePort, ...regions.map((r) => r.port), port])
  if (await ensureGeneratedModel(opts.modelDir)) events.status(`generated ${opts.modelDir}`)

  const supervisor = new Supervisor(join(STATE_DIR, 'logs'), events)
  const stop = () => supervisor.stopAll()
  try {
    events.status(`starting redis-server on ${LOCAL.host}:${LOCAL.redisPort}`)
    await supervisor.start(redisSpec(redisBin))
    events.status(`starting the Upstash bridge on ${LOCAL.host}:${LOCAL.bridgePort}`)
    await supervisor.start(bridgeSpec())
    await seedKey(new Redis({ url: `http://${LOCAL.host}:${LOCAL.bridgePort}`, token: LOCAL.upstashToken }), opts.devApiKey, { tenant: 'dev', name: 'local dev key', id: 'key_dev' })
    for (const r of regions) {
      events.status(`starting GPU node ${r.name} on ${LOCAL.host}:${r.port} (${opts.modelDir})`)
      await supervisor.start(nodeSpec(opts, r.name, r.port))
    }
    events.status(opts.edge === 'node' ? `starting the Node edge on ${LOCAL.host}:${port}` : `starting the edge under wrangler dev on ${LOCAL.host}:${port}`)
    await supervisor.start(opts.edge === 'node' ? nodeEdgeSpec(opts) : wranglerSpec(opts))
  } catch (e) {
    await stop()
    throw e
  }
  return { supervisor, edgeUrl: `http://${LOCAL.host}:${port}`, stop }
}

function redisSpec(binary: string): ServiceSpec {
  const dir = join(STATE_DIR, 'redis')
  mkdirSync(dir, { recursive: true })
  return {
    name: 'redis',
    command: binary,
    args: ['--port', String(LOCAL.redisPort), '--bind', LOCAL.host, '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'],
    ready: () => redisAnswers(LOCAL.redisPort),
    critical: true,
  }
}

function bridgeSpec(): ServiceSpec {
  return {
    name: 'upstash-bridge',
    command: process.execPath,
    args: [...TSX, 'infra/local/upstash-bridge-cli.ts'],
    env: { BRIDGE_HOST: LOCAL.host, BRIDGE_PORT: String(LOCAL.bridgePort), REDIS_URL: `redis://${LOCAL.host}:${LOCAL.redisPort}`, UPSTASH_TOKEN: LOCAL.upstashToken },
    ready: () => httpAnswers(`http://${LOCAL.host}:${LOCAL.bridgePort}/`, { method: 'POST', headers: { authorization: `Bearer ${LOCAL.upstashToken}` }, body: '["PING"]' }),
    critical: true,
  }
}

function nodeSpec(opts: StackOptions, region: string, port: number): ServiceSpec {
  const r = regionsFor(opts.regions).find((x) => x.name === region)!
  return {
    name: `gpu-node-${region}`,
    command: process.execPath,
    args: ['infra/scripts/launch-gpu-node.mjs'],
    env: nodeEnv(opts, r),
    ready: () => httpAnswers(`http://${LOCAL.host}:${port}/readyz`),
    critical: false,
  }
}

function wranglerSpec(opts: StackOptions): ServiceSpec {
  const envFile = join(STATE_DIR, 'edge.env')
  // Single quotes: wrangler's env-file parser keeps backslash escapes inside double quotes, which
  // would corrupt the JSON in GPU_NODES. None of the values contains a single quote.
  writeFileSync(envFile, Object.entries(edgeEnv(opts)).map(([k, v]) => `${k}='${v}'`).join('\n') + '\n')
  return {
    name: 'edge',
    command: process.execPath,
    args: ['node_modules/wrangler/bin/wrangler.js', 'dev', '--ip', LOCAL.host, '--port', String(LOCAL.wranglerPort), '--env-file', envFile, '--show-interactive-dev-session=false', '--log-level', 'warn'],
    // Offline: no cf fetch, no telemetry (FACTS.md).
    env: { CLOUDFLARE_CF_FETCH_ENABLED: 'false', WRANGLER_SEND_METRICS: 'false' },
    ready: () => httpAnswers(`http://${LOCAL.host}:${LOCAL.wranglerPort}/healthz`),
    readyTimeoutMs: 120_000,
    critical: true,
  }
}

function nodeEdgeSpec(opts: StackOptions): ServiceSpec {
  return {
    name: 'edge',
    command: process.execPath,
    args: [...TSX, 'edge/src/node.ts'],
    env: { ...edgeEnv(opts), HOST: LOCAL.host, PORT: String(LOCAL.nodeEdgePort) },
    ready: () => httpAnswers(`http://${LOCAL.host}:${LOCAL.nodeEdgePort}/healthz`),
    critical: true,
  }
}

/** redis-server from Debian: installed when missing and running as root, else a clear instruction. */
function ensureRedisInstalled(events: SupervisorEvents): string {
  try {
    return findRedisServer()
  } catch (e) {
    if (process.getuid?.() !== 0) throw new Error(`${(e as Error).message} (as root, or with sudo)`)
    events.status('redis-server is missing: apt-get install -y redis-server')
    execFileSync('sh', ['-c', 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server'], { stdio: 'inherit' })
    return findRedisServer()
  }
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
