/**
 * The real local stack (infra/local/stack.ts: redis-server, the Upstash bridge, GPU nodes on
 * models/tiny, the edge under `wrangler dev` or the Node entry) started programmatically on free
 * ports with its own state dir, so a test file can run beside `npm start` and beside other test
 * files. One per test file: wrangler dev takes seconds to start.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from '@upstash/redis'
import { freePort } from '../../../infra/local/redis-process.ts'
import { DEFAULT_EDGE_KIND, edgeEnv, LOCAL, REGIONS, stackRegions, type EdgeKind, type Region, type StackOptions } from '../../../infra/local/stack-config.ts'
import { startStack, type RunningStack } from '../../../infra/local/stack.ts'
import { buildNodeEdge } from '../../../infra/build/edge-node.ts'
import type { WanOptions } from '../../../infra/local/stack-config.ts'
import { Metrics, pollUntil } from '../../node/gpu-node-process.ts'

export { pollUntil }

export interface TestStackOptions {
  regions?: number
  /** GPU nodes per region (default 1). */
  nodesPerRegion?: number
  edge?: EdgeKind
  edgeVars?: Record<string, string>
  nodeVars?: Record<string, string>
  /** The GPU nodes' nice(1) increment (stack-config.ts nodeNice; default none). */
  nodeNice?: number
  /** WAN delays between the edge (first region) and the other regions' nodes (infra/local/stack-wan.ts). */
  wan?: WanOptions
  /** false: a Workers edge that does not rebuild when its sources change (stack-config.ts edgeWatch). */
  edgeWatch?: boolean
}

export interface TestStack {
  edgeUrl: string
  /** The model id every node serves. */
  model: string
  devApiKey: string
  adminToken: string
  /** An @upstash/redis client on the stack's bridge (key admin, registry reads). */
  upstash: Redis
  upstashUrl: string
  regions: Region[]
  /** The edge's variables in this stack (for a second edge beside it). */
  edgeEnv: Record<string, string>
  running: RunningStack
  /** The supervisor's status lines so far. */
  status: string[]
  /** Critical services the supervisor reported dead. */
  fatal: string[]
  nodeUrl(region: string): string
  /** The node process's pid (undefined while it is down). */
  nodePid(region: string): number | undefined
  /** Kills the region's node (SIGKILL: no drain); the supervisor restarts it, not before `downForMs`. */
  killNode(region: string, opts?: { downForMs?: number }): void
  metrics(region: string): Promise<Metrics>
  /**
   * Another edge beside the stack's: the Node entry (`npm run edge:node`, edge/src/entries/node.ts) as a
   * supervised child process with this stack's edge variables plus `vars`, on a free port; it has
   * its own caches and mark-downs. Resolves with its URL once /healthz answers; stopped with the stack.
   */
  startNodeEdge(name: string, vars?: Record<string, string>): Promise<string>
  /** The last lines of a service's log (for failure messages). */
  logTail(service: string, lines?: number): string
  stop(): Promise<void>
}

/** x-zl-client-geo values that sit on each region (DESIGN.md §9). */
export const GEO: Record<string, string> = Object.fromEntries(REGIONS.map((r) => [r.name, `${r.lat},${r.lon}`]))

export async function startTestStack(options: TestStackOptions = {}): Promise<TestStack> {
  const regions = options.regions ?? 2
  const nodesPerRegion = options.nodesPerRegion ?? 1
  const stateDir = mkdtempSync(join(tmpdir(), 'zl-e2e-'))
  const [redis, bridge, edge, inspector, ...nodes] = await Promise.all(Array.from({ length: 4 + regions * nodesPerRegion }, () => freePort()))
  const opts: StackOptions = {
    regions,
    nodesPerRegion,
    edge: options.edge ?? DEFAULT_EDGE_KIND,
    modelDir: 'models/tiny',
    devApiKey: LOCAL.devApiKey,
    adminToken: LOCAL.adminToken,
    stateDir,
    ports: { redis: redis!, bridge: bridge!, edge: edge!, inspector: inspector!, nodes },
    ...(options.edgeVars ? { edgeVars: options.edgeVars } : {}),
    ...(options.nodeVars ? { nodeVars: options.nodeVars } : {}),
    ...(options.wan ? { wan: options.wan } : {}),
    ...(options.nodeNice ? { nodeNice: options.nodeNice } : {}),
    ...(options.edgeWatch === false ? { edgeWatch: false } : {}),
  }
  const status: string[] = []
  const fatal: string[] = []
  const verbose = process.env.ZL_E2E_VERBOSE === '1'
  const events = {
    status: (line: string) => {
      status.push(line)
      if (verbose) process.stderr.write(`[e2e stack] ${line}\n`)
    },
    fatal: (name: string, reason: string) => {
      fatal.push(`${name}: ${reason}`)
      if (verbose) process.stderr.write(`[e2e stack] FATAL ${name}: ${reason}\n`)
    },
  }
  let running: RunningStack
  try {
    running = await startStack(opts, events)
  } catch (e) {
    rmSync(stateDir, { recursive: true, force: true })
    throw e
  }
  // A test worker that dies must not leave a stack behind holding ports and cores.
  const services = ['edge', ...running.nodeServices, 'upstash-bridge', 'redis']
  const killAll = () => {
    for (const s of services) {
      const pid = running.supervisor.pid(s)
      if (pid) try { process.kill(pid, 'SIGKILL') } catch { /* gone */ }
    }
  }
  process.once('exit', killAll)

  const upstashUrl = `http://${LOCAL.host}:${bridge}`
  const byName = new Map(stackRegions(opts).map((r) => [r.name, r]))
  const region = (name: string) => {
    const r = byName.get(name)
    if (!r) throw new Error(`no region ${name} in this stack`)
    return r
  }
  const nodeUrl = (name: string) => `http://${LOCAL.host}:${region(name).port}`
  let stopped = false
  return {
    edgeUrl: running.edgeUrl,
    model: 'tiny',
    devApiKey: LOCAL.devApiKey,
    adminToken: LOCAL.adminToken,
    upstash: new Redis({ url: upstashUrl, token: LOCAL.upstashToken, enableTelemetry: false }),
    upstashUrl,
    regions: [...byName.values()],
    edgeEnv: edgeEnv(running.opts),
    running,
    status,
    fatal,
    nodeUrl,
    nodePid: (name) => running.supervisor.pid(running.nodeService(region(name).name)),
    killNode: (name, o = {}) => running.supervisor.kill(running.nodeService(region(name).name), 'SIGKILL', o),
    metrics: async (name) => {
      const res = await fetch(`${nodeUrl(name)}/metrics`)
      if (res.status !== 200) throw new Error(`GET ${name} /metrics: ${res.status}`)
      return new Metrics(await res.text())
    },
    startNodeEdge: async (name, vars = {}) => {
      const port = await freePort()
      const url = `http://${LOCAL.host}:${port}`
      await running.supervisor.start({
        name,
        command: process.execPath,
        // As `npm run edge:node` runs it: the bundle (infra/build/edge-node.ts), built into this stack's folder.
        args: [await buildNodeEdge(join(stateDir, name))],
        env: { ...edgeEnv(running.opts), ...vars, HOST: LOCAL.host, PORT: String(port) },
        ready: async () => {
          const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) })
          await res.body?.cancel()
          return res.ok
        },
        critical: true,
      })
      services.unshift(name)
      return url
    },
    logTail: (service, lines = 20) => {
      try {
        return readFileSync(running.supervisor.logFile(service), 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
      } catch {
        return ''
      }
    },
    async stop() {
      if (stopped) return
      stopped = true
      try {
        await running.stop()
      } finally {
        process.removeListener('exit', killAll)
        rmSync(stateDir, { recursive: true, force: true })
      }
    },
  }
}

/** Waits for a supervisor status line matching `re` (bounded). */
export function waitForStatus(stack: TestStack, re: RegExp, what: string, timeoutMs = 30_000): Promise<string> {
  return pollUntil(async () => stack.status.find((l) => re.test(l)), (l) => l !== undefined, what, timeoutMs, 50) as Promise<string>
}

/** Waits until a node reports nothing running or waiting. */
export function waitIdle(stack: TestStack, region: string, timeoutMs = 10_000): Promise<Metrics> {
  return pollUntil(
    () => stack.metrics(region),
    (m) => m.value('zl_num_requests_running') === 0 && m.value('zl_num_requests_waiting') === 0,
    `${region}: zero running and waiting requests`,
    timeoutMs,
  )
}
