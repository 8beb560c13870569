/**
 * Child processes of a benchmark run (GPU nodes, edges, the Upstash bridge, wrangler dev, the
 * instant upstream): each started in its own process group so that stopping it also stops what
 * it started (wrangler → workerd), optionally pinned to one core with `taskset`, its output kept
 * (last lines) for error messages, and every one of them stopped when the run ends or is
 * interrupted. Only processes started here are ever signalled, by their own process group id.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'

export const MALLOC_ENV = { MALLOC_MMAP_MAX_: '0', MALLOC_TRIM_THRESHOLD_: '68719476736' }
const CLK_TCK = 100

/** User + system CPU seconds of a process so far, from /proc (throws when it is gone). */
export function processCpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  // The name field may hold spaces: count from its closing parenthesis. fields[0] is field 3
  // (state): utime is field 14, stime field 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK
}

/** Resident memory (MiB) and CPU time so far (s, user + system) of a process and each of its descendants (from /proc). */
export function processTree(pid: number | undefined): Array<{ pid: number; name: string; mib: number; cpuS: number }> {
  if (pid === undefined) return []
  const children = (p: number): number[] => {
    try {
      return readdirSync(`/proc/${p}/task`).flatMap((t) => readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number))
    } catch {
      return []
    }
  }
  const out: Array<{ pid: number; name: string; mib: number; cpuS: number }> = []
  const stack = [pid]
  while (stack.length > 0) {
    const p = stack.pop()!
    try {
      const status = readFileSync(`/proc/${p}/status`, 'utf8')
      const cpuS = processCpuSeconds(p)
      out.push({ pid: p, name: /Name:\s+(\S+)/.exec(status)?.[1] ?? '?', mib: Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024), cpuS })
    } catch {
      continue
    }
    stack.push(...children(p))
  }
  return out
}

/** A process tree's RSS, MiB; null when the process is gone. */
export function totalMiB(tree: ReadonlyArray<{ mib: number }>): number | null {
  return tree.length === 0 ? null : tree.reduce((n, p) => n + p.mib, 0)
}

const live = new Set<Proc>()

export interface SpawnOptions {
  env?: Record<string, string | undefined>
  /** Pin to these cores (taskset -c), when taskset exists. */
  cpus?: string
  /** Open an IPC channel (the event-loop-delay probe answers on it). */
  ipc?: boolean
  cwd?: string
}

export interface Proc {
  name: string
  pid: number
  child: ChildProcess
  /** Resolves with the first stdout/stderr line matching `pred` (JSON lines are parsed). */
  waitFor(pred: (line: string, json: Record<string, unknown> | undefined) => boolean, timeoutMs: number): Promise<{ line: string; json?: Record<string, unknown> }>
  /** The last lines of output, for error messages. */
  tail(): string
  /** User + system CPU seconds of the process itself (all its threads), from /proc. */
  cpuSeconds(): number
  exited: Promise<number | null>
  /** SIGTERM to its process group, SIGKILL after `graceMs`. Idempotent. */
  stop(graceMs?: number): Promise<void>
}

let tasksetChecked: boolean | undefined
export function hasTaskset(): boolean {
  tasksetChecked ??= spawnSync('taskset', ['-c', '0', 'true']).status === 0
  return tasksetChecked
}

export function spawnProc(name: string, command: string, args: string[], opts: SpawnOptions = {}): Proc {
  const pinned = opts.cpus !== undefined && hasTaskset()
  const child = spawn(pinned ? 'taskset' : command, pinned ? ['-c', opts.cpus!, command, ...args] : args, {
    cwd: opts.cwd ?? process.cwd(),
    env: { ...process.env, ...opts.env } as NodeJS.ProcessEnv,
    stdio: opts.ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
    detached: true,
  })
  const lines: string[] = []
  const waiters: Array<{ pred: (l: string, j: Record<string, unknown> | undefined) => boolean; resolve: (v: { line: string; json?: Record<string, unknown> }) => void }> = []
  const onText = (() => {
    let rest = ''
    return (s: string) => {
      rest += s
      let nl: number
      while ((nl = rest.indexOf('\n')) >= 0) {
        const line = rest.slice(0, nl)
        rest = rest.slice(nl + 1)
        lines.push(line)
        if (lines.length > 60) lines.shift()
        // The load generator shares this process: a request log (one line per request) is only
        // kept for the tail, not parsed, unless something waits for a line.
        if (waiters.length === 0) continue
        let json: Record<string, unknown> | undefined
        if (line.startsWith('{')) {
          try {
            json = JSON.parse(line) as Record<string, unknown>
          } catch { /* not JSON */ }
        }
        for (const w of [...waiters]) {
          if (w.pred(line, json)) {
            waiters.splice(waiters.indexOf(w), 1)
            w.resolve({ line, ...(json ? { json } : {}) })
          }
        }
      }
    }
  })()
  child.stdout!.setEncoding('utf8').on('data', onText)
  child.stderr!.setEncoding('utf8').on('data', onText)
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  let stopping: Promise<void> | undefined
  const proc: Proc = {
    name,
    pid: child.pid!,
    child,
    exited,
    tail: () => lines.slice(-25).join('\n'),
    waitFor(pred, timeoutMs) {
      return new Promise((resolve, reject) => {
        const w = { pred, resolve: (v: { line: string; json?: Record<string, unknown> }) => (clearTimeout(timer), resolve(v)) }
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1)
          reject(new Error(`${name}: no expected output within ${timeoutMs} ms; last output:\n${proc.tail()}`))
        }, timeoutMs)
        waiters.push(w)
        void exited.then((code) => {
          if (!waiters.includes(w)) return
          waiters.splice(waiters.indexOf(w), 1)
          clearTimeout(timer)
          reject(new Error(`${name} exited (code ${code}) before it was ready; last output:\n${proc.tail()}`))
        })
      })
    },
    cpuSeconds() {
      try {
        return processCpuSeconds(child.pid!)
      } catch {
        return NaN
      }
    },
    stop(graceMs = 8000) {
      stopping ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          signalGroup(child.pid!, 'SIGTERM')
          const done = await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])
          if (!done) {
            signalGroup(child.pid!, 'SIGKILL')
            await Promise.race([exited, sleep(2000)])
          }
        }
        // Whatever it left in its group (e.g. workerd under wrangler) goes too.
        signalGroup(child.pid!, 'SIGKILL')
        live.delete(proc)
      })()
      return stopping
    },
  }
  live.add(proc)
  return proc
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal)
  } catch { /* already gone */ }
}

/** Stops every process this run started (on the way out, or on Ctrl-C). */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.stop(3000)))
}

/** Synchronous last resort for process 'exit': SIGKILL every group still alive. */
export function killAllNow(): void {
  for (const p of live) signalGroup(p.pid, 'SIGKILL')
}

/** Polls `check` until it returns true or the time runs out. */
export async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs: number, intervalMs = 200): Promise<void> {
  const end = Date.now() + timeoutMs
  for (;;) {
    try {
      if (await check()) return
    } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`${what}: not ready within ${timeoutMs} ms`)
    await sleep(intervalMs)
  }
}

/** The machine's 1-minute load average and core count, for the report. */
export function machineLoad(): { load1: number; load5: number; cores: number } {
  try {
    const [l1, l5] = readFileSync('/proc/loadavg', 'utf8').split(' ').map(Number)
    return { load1: l1, load5: l5, cores: availableParallelism() }
  } catch {
    return { load1: NaN, load5: NaN, cores: availableParallelism() }
  }
}

/** Pins this process (all its threads) to `cpus` (taskset -a -p); returns a function restoring the previous set. */
export function pinSelf(cpus: string): () => void {
  return pinPid(process.pid, cpus)
}

/** Pins every thread of a running process to `cpus`; the returned function restores its affinity. */
export function pinPid(pid: number, cpus: string): () => void {
  if (!hasTaskset()) return () => {}
  const before = spawnSync('taskset', ['-cp', String(pid)], { encoding: 'utf8' }).stdout.split(':').pop()?.trim()
  spawnSync('taskset', ['-a', '-cp', cpus, String(pid)])
  return () => {
    if (before) spawnSync('taskset', ['-a', '-cp', before, String(pid)])
  }
}
