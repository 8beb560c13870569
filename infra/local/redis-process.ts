/**
 * A real `redis-server` as a child process for tests, the local stack and the bridge CLI:
 * loopback only, no persistence (`--save '' --appendonly no`), its own temp dir, ready once it
 * answers PING.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { accessSync, constants, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { delimiter, isAbsolute, join } from 'node:path'
import { RespConnection } from './redis-client.ts'

export const DEFAULT_REDIS_PORT = 6380
const INSTALL_HINT = 'install it: apt-get install -y redis-server'

export interface StartRedisOptions {
  /** Default 6380 (DESIGN.md §9); 0 picks a free port. */
  port?: number
  host?: string
  /** Path or command name; default `redis-server` on PATH, then /usr/bin, /usr/local/bin. */
  binary?: string
  /** How long to wait for the first PONG. */
  readyTimeoutMs?: number
}

export interface RedisProcess {
  host: string
  port: number
  /** `redis://host:port`. */
  url: string
  pid: number
  /** SIGTERM, then SIGKILL after 5 s; removes the temp dir. Idempotent. */
  stop(): Promise<void>
}

/** Ports `freePort` draws from: above the local stack's fixed ones, below the ephemeral range. */
const DRAWN_PORTS_FROM = 10_000

/**
 * A port on `host` that was free a moment ago, for a process started next to bind. Drawn at random
 * below the kernel's ephemeral range: `listen(0)` picks from that range, and so does every
 * outgoing connection for its local port, so under parallel test files a connection could take a
 * just-picked port before the service bound it (a node failed with EADDRINUSE in CI).
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const below = Math.min(ephemeralPortsFrom(), 32_768)
  for (let attempt = 0; below - DRAWN_PORTS_FROM >= 1000 && attempt < 50; attempt++) {
    const port = DRAWN_PORTS_FROM + Math.floor(Math.random() * (below - DRAWN_PORTS_FROM))
    const free = await listenOn(host, port).catch(() => undefined)
    if (free !== undefined) return free
  }
  return listenOn(host, 0)
}

/** Binds `port` (0: any) on `host`, releases it, and returns the port that was bound. */
async function listenOn(host: string, port: number): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, resolve)
  })
  const bound = (server.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return bound
}

/** The first port of the kernel's ephemeral range (Linux; elsewhere the common default). */
function ephemeralPortsFrom(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0])
    return Number.isInteger(first) && first > 0 ? first : 32_768
  } catch {
    return 32_768
  }
}

/** The absolute path of the redis-server binary, or a clear error saying how to install it. */
export function findRedisServer(binary = process.env.REDIS_SERVER_BIN ?? 'redis-server'): string {
  const candidates = isAbsolute(binary)
    ? [binary]
    : [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), '/usr/bin', '/usr/local/bin'].map((dir) => join(dir, binary))
  for (const path of candidates) {
    try {
      accessSync(path, constants.X_OK)
      return path
    } catch { /* next */ }
  }
  throw new Error(`redis-server not found (looked for ${binary} on PATH, /usr/bin, /usr/local/bin); ${INSTALL_HINT}`)
}

export async function startRedis(options: StartRedisOptions = {}): Promise<RedisProcess> {
  const host = options.host ?? '127.0.0.1'
  const binary = findRedisServer(options.binary)
  const port = options.port === 0 ? await freePort(host) : (options.port ?? DEFAULT_REDIS_PORT)
  await assertPortFree(host, port)

  const dir = mkdtempSync(join(tmpdir(), 'zl-redis-'))
  const child = spawn(binary, [
    '--port', String(port), '--bind', host, '--save', '', '--appendonly', 'no',
    '--dir', dir, '--daemonize', 'no', '--logfile', '', '--loglevel', 'warning',
  ], { stdio: ['ignore', 'pipe', 'pipe'] })
  const log: string[] = []
  const keepLog = (chunk: Buffer) => { log.push(...chunk.toString().split('\n').filter(Boolean)); log.splice(0, log.length - 20) }
  child.stdout!.on('data', keepLog)
  child.stderr!.on('data', keepLog)
  child.on('error', (err) => log.push(`spawn error: ${err.message}`))
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  const killOnExit = () => child.kill('SIGKILL')
  process.once('exit', killOnExit)

  let stopped: Promise<void> | undefined
  const stop = () => (stopped ??= stopChild(child, exited).finally(() => {
    process.removeListener('exit', killOnExit)
    rmSync(dir, { recursive: true, force: true })
  }))

  try {
    await waitForPong(host, port, exited, options.readyTimeoutMs ?? 10_000, log)
  } catch (err) {
    await stop()
    throw err
  }
  return { host, port, url: `redis://${host}:${port}`, pid: child.pid!, stop }
}

async function assertPortFree(host: string, port: number): Promise<void> {
  const server = net.createServer()
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, host, resolve)
    })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EADDRINUSE') {
      throw new Error(`cannot start redis-server: ${host}:${port} is already in use (another redis-server? stop it, or pick another port)`)
    }
    throw err
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

/** Resolves on the first PONG; rejects if the process exits first or the timeout passes. */
async function waitForPong(host: string, port: number, exited: Promise<number | null>, timeoutMs: number, log: string[]): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let exitCode: number | null | undefined
  void exited.then((code) => { exitCode = code })
  while (Date.now() < deadline) {
    if (exitCode !== undefined) {
      const inUse = log.some((l) => /address already in use/i.test(l))
      throw new Error(inUse
        ? `cannot start redis-server: ${host}:${port} is already in use`
        : `redis-server exited with code ${exitCode} before it was ready:\n${log.join('\n')}`)
    }
    try {
      const conn = await RespConnection.connect({ host, port }, 500)
      const reply = await conn.send(['PING'])
      conn.close()
      if (reply === 'PONG') return
    } catch { /* not listening yet */ }
    // Between attempts wait for either the process to exit or a short retry tick.
    await Promise.race([exited, new Promise((r) => setTimeout(r, 20))])
  }
  throw new Error(`redis-server on ${host}:${port} did not answer PING within ${timeoutMs} ms:\n${log.join('\n')}`)
}

async function stopChild(child: ChildProcess, exited: Promise<number | null>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
  await exited
  clearTimeout(timer)
}
