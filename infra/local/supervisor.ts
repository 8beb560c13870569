/**
 * Runs the local stack's services as child processes: starts each in order and waits until it
 * is ready, writes its output to a log file, and watches it. A critical service that dies stops
 * the whole stack (with the reason and its last log lines); a non-critical one (a GPU node: a
 * region outage the system must survive) is reported and restarted after a back-off.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from 'node:fs'
import { join } from 'node:path'

export interface ServiceSpec {
  name: string
  command: string
  args: string[]
  env?: Record<string, string>
  /** True once the service answers (an HTTP probe, a PING); polled until `readyTimeoutMs`. */
  ready: () => Promise<boolean>
  readyTimeoutMs?: number
  /** Critical services stop the stack when they die; others are restarted. */
  critical: boolean
  /** Lower CPU priority (nice(1) increment, inherited by every thread the process starts). */
  nice?: number
}

export interface SupervisorEvents {
  status(line: string): void
  /** A critical service died (or could not start): the stack is stopping. */
  fatal(name: string, reason: string): void
}

interface Running {
  spec: ServiceSpec
  child: ChildProcess
  exited: Promise<void>
  restarts: number
  startedAt: number
  /** Set by kill(): the restart waits at least this long after the exit. */
  downForMs?: number
}

const MAX_BACKOFF_MS = 30_000

export class Supervisor {
  private readonly running = new Map<string, Running>()
  private stopping = false

  constructor(
    private readonly logDir: string,
    private readonly events: SupervisorEvents,
  ) {
    mkdirSync(logDir, { recursive: true })
  }

  logFile(name: string): string {
    return join(this.logDir, `${name}.log`)
  }

  /** Starts a service and resolves once it is ready; rejects if it exits or times out first. */
  async start(spec: ServiceSpec, restarts = 0): Promise<void> {
    const log = createWriteStream(this.logFile(spec.name), { flags: restarts ? 'a' : 'w' })
    // nice(1) execs the command: the child's pid stays the service's own (signals reach it).
    const [command, args] = spec.nice ? ['nice', ['-n', String(spec.nice), spec.command, ...spec.args]] : [spec.command, spec.args]
    const child = spawn(command, args, { env: { ...process.env, ...spec.env }, stdio: ['ignore', 'pipe', 'pipe'], detached: false })
    child.stdout!.pipe(log, { end: false })
    child.stderr!.pipe(log, { end: false })
    let exitReason: string | undefined
    const exited = new Promise<void>((resolve) => {
      child.once('error', (e) => {
        exitReason = `could not start ${spec.command}: ${e.message}`
        resolve()
      })
      child.once('exit', (code, signal) => {
        exitReason ??= signal ? `killed by ${signal}` : `exited with code ${code}`
        resolve()
      })
    })
    const entry: Running = { spec, child, exited, restarts, startedAt: Date.now() }
    this.running.set(spec.name, entry)
    try {
      await this.waitReady(spec, () => exitReason)
    } catch (e) {
      this.running.delete(spec.name)
      child.kill('SIGKILL')
      throw new Error(`${spec.name}: ${(e as Error).message}${this.tail(spec.name)}`)
    }
    // On exit the log is closed, but the pipes may outlive the process: a child it started
    // (wrangler's workerd) can hold them and keep writing, and a write into the ended log was an
    // uncaught ERR_STREAM_WRITE_AFTER_END that took the whole stack down at its stop. So the
    // pipes are detached first, and what still comes is read and dropped.
    const closeLog = () => {
      for (const out of [child.stdout!, child.stderr!]) {
        out.unpipe(log)
        out.resume()
      }
      log.end()
    }
    void exited.then(() => this.onExit(entry, exitReason ?? 'exited', closeLog))
  }

  /** Stops every service, last started first: SIGTERM, then SIGKILL after `graceMs`. */
  async stopAll(graceMs = 10_000): Promise<void> {
    this.stopping = true
    for (const entry of [...this.running.values()].reverse()) {
      this.events.status(`stopping ${entry.spec.name}`)
      entry.child.kill('SIGTERM')
      const timer = setTimeout(() => entry.child.kill('SIGKILL'), graceMs)
      await entry.exited
      clearTimeout(timer)
    }
    this.running.clear()
  }

  /**
   * Kills a running service with `signal` (an outage on demand, for tests and benchmarks). A
   * non-critical service is restarted as after any death, but not before `downForMs` have passed
   * (a region that stays down long enough for its heartbeat row to go stale).
   */
  kill(name: string, signal: NodeJS.Signals, opts: { downForMs?: number } = {}): void {
    const entry = this.running.get(name)
    if (!entry) throw new Error(`no running service ${name}`)
    if (opts.downForMs !== undefined) entry.downForMs = opts.downForMs
    entry.child.kill(signal)
  }

  /** For tests and operators: the pid of a running service. */
  pid(name: string): number | undefined {
    return this.running.get(name)?.child.pid
  }

  private async waitReady(spec: ServiceSpec, exitReason: () => string | undefined): Promise<void> {
    const deadline = Date.now() + (spec.readyTimeoutMs ?? 60_000)
    while (Date.now() < deadline) {
      const reason = exitReason()
      if (reason) throw new Error(`${reason} before it was ready`)
      if (await spec.ready().catch(() => false)) return
      await new Promise((r) => setTimeout(r, 100))
    }
    throw new Error(`not ready after ${spec.readyTimeoutMs ?? 60_000} ms`)
  }

  private onExit(entry: Running, reason: string, closeLog: () => void): void {
    closeLog()
    if (this.stopping || this.running.get(entry.spec.name) !== entry) return
    this.running.delete(entry.spec.name)
    if (entry.spec.critical) {
      this.events.fatal(entry.spec.name, `${reason}${this.tail(entry.spec.name)}`)
      return
    }
    // A node that ran a minute counts as healthy again: start the back-off over.
    const restarts = Date.now() - entry.startedAt > 60_000 ? 0 : entry.restarts + 1
    this.scheduleRestart(entry.spec, restarts, reason, entry.downForMs)
  }

  private scheduleRestart(spec: ServiceSpec, restarts: number, reason: string, downForMs = 0): void {
    const backoffMs = Math.max(downForMs, Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.max(0, restarts - 1)))
    this.events.status(`${spec.name} ${reason}; restarting in ${(backoffMs / 1000).toFixed(0)} s (region outage until then)`)
    setTimeout(() => {
      if (this.stopping) return
      this.start(spec, restarts)
        .then(() => this.events.status(`${spec.name} is back`))
        .catch(() => this.scheduleRestart(spec, restarts + 1, 'failed to restart'))
    }, backoffMs).unref()
  }

  private tail(name: string, lines = 15): string {
    try {
      const text = readFileSync(this.logFile(name), 'utf8').trimEnd().split('\n').slice(-lines).join('\n    ')
      return text ? `\n  last lines of ${this.logFile(name)}:\n    ${text}` : ''
    } catch {
      return ''
    }
  }
}
