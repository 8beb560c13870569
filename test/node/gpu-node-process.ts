/**
 * The real GPU node (gpu-node/src/main.ts) as a child process on 127.0.0.1, for cross-process
 * tests: started with the launcher's malloc environment, ready when it logs `{"msg":"ready"}`,
 * stopped with SIGTERM (drain) or SIGKILL. One per test file: start-up is ~1 s of CPU.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const MAIN = 'gpu-node/src/main.ts'
/** Start-up is under a second when idle; allow for a loaded 2-core CI box. */
const READY_TIMEOUT_MS = 60_000
/** A drain with nothing in flight takes milliseconds (plus the 5 s socket force-close, see overload-drain.test.ts). */
const EXIT_TIMEOUT_MS = 20_000

export interface ExitStatus {
  code: number | null
  signal: NodeJS.Signals | null
}

export interface StartOptions {
  /** Extra environment (MAX_BATCH, EDGE_SHARED_SECRET, …). ALLOW_UNSIGNED=1 unless EDGE_SHARED_SECRET is set. */
  env?: Record<string, string>
}

export interface GpuNodeProcess {
  /** `http://127.0.0.1:<port>` from the ready log line. */
  url: string
  /** The served model id (the ready log's `model`). */
  model: string
  child: ChildProcess
  /** Every JSON log line so far (stdout), parsed; non-JSON lines are kept as `{ raw }`. */
  logs: Array<Record<string, unknown>>
  /** Raw stderr text so far. */
  stderr(): string
  /** Resolves with the first log line (already seen or future) matching `pred`. */
  waitForLog(pred: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>
  /** A scrape of GET /metrics. */
  metrics(): Promise<Metrics>
  /** Resolves when the process exits (at once if it already has). */
  exited: Promise<ExitStatus>
  /** SIGTERM (the node drains) and waits for exit. */
  stop(): Promise<ExitStatus>
  /** SIGKILL and waits for exit. */
  kill(): Promise<ExitStatus>
}

export async function startGpuNode(opts: StartOptions = {}): Promise<GpuNodeProcess> {
  const env: Record<string, string | undefined> = {
    ...process.env,
    MALLOC_MMAP_MAX_: '0',
    MALLOC_TRIM_THRESHOLD_: '68719476736',
    MODEL_DIR: 'models/tiny',
    HOST: '127.0.0.1',
    PORT: '0',
    REGION: 'test',
    // A test's nodes must never heartbeat into a developer's registry.
    UPSTASH_REDIS_REST_URL: undefined,
    UPSTASH_REDIS_REST_TOKEN: undefined,
    EDGE_SHARED_SECRET: undefined,
    ALLOW_UNSIGNED: opts.env?.EDGE_SHARED_SECRET ? undefined : '1',
    // Tiny-model steps are ~1 ms: one ONNX thread each keeps parallel test files from fighting over 2 cores.
    INTRA_OP_THREADS: '1',
    ...opts.env,
  }
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const logs: Array<Record<string, unknown>> = []
  const waiters: Array<{ pred: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }> = []
  let stderr = ''
  let stdoutRest = ''

  // A test worker that dies must not leave a node behind holding a port and a core.
  const killOnExit = () => child.kill('SIGKILL')
  process.once('exit', killOnExit)
  const exited = new Promise<ExitStatus>((resolve) =>
    child.once('exit', (code, signal) => {
      process.removeListener('exit', killOnExit)
      resolve({ code, signal })
    }),
  )
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s))
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    stdoutRest += s
    let nl: number
    while ((nl = stdoutRest.indexOf('\n')) >= 0) {
      const text = stdoutRest.slice(0, nl)
      stdoutRest = stdoutRest.slice(nl + 1)
      if (text.trim() === '') continue
      let line: Record<string, unknown>
      try {
        line = JSON.parse(text) as Record<string, unknown>
      } catch {
        line = { raw: text }
      }
      logs.push(line)
      for (const w of [...waiters]) {
        if (w.pred(line)) {
          waiters.splice(waiters.indexOf(w), 1)
          w.resolve(line)
        }
      }
    }
  })

  const waitForLog = (pred: (l: Record<string, unknown>) => boolean, timeoutMs = 30_000) => {
    const seen = logs.find(pred)
    if (seen) return Promise.resolve(seen)
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const w = { pred, resolve: (l: Record<string, unknown>) => (clearTimeout(timer), resolve(l)) }
      const timer = setTimeout(() => {
        waiters.splice(waiters.indexOf(w), 1)
        reject(new Error(`no matching node log line within ${timeoutMs} ms; logs:\n${describeLogs(logs, stderr)}`))
      }, timeoutMs)
      waiters.push(w)
      void exited.then(() => {
        if (!waiters.includes(w)) return
        // Let the last stdout chunk be parsed first.
        setImmediate(() => {
          if (!waiters.includes(w)) return
          waiters.splice(waiters.indexOf(w), 1)
          clearTimeout(timer)
          reject(new Error(`node exited before a matching log line; logs:\n${describeLogs(logs, stderr)}`))
        })
      })
    })
  }

  let ready: Record<string, unknown>
  try {
    ready = await waitForLog((l) => l.msg === 'ready', READY_TIMEOUT_MS)
  } catch (e) {
    child.kill('SIGKILL')
    throw e
  }
  const url = String(ready.url)

  /** Signals and waits; a node that does not exit in time is SIGKILLed (never left running) and the call fails. */
  const signalAndWait = async (signal: NodeJS.Signals): Promise<ExitStatus> => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal)
    try {
      return await withTimeout(exited, EXIT_TIMEOUT_MS, () => `node did not exit within ${EXIT_TIMEOUT_MS} ms of ${signal}; logs:\n${describeLogs(logs, stderr)}`)
    } catch (e) {
      child.kill('SIGKILL')
      await exited
      throw e
    }
  }

  return {
    url,
    model: String(ready.model),
    child,
    logs,
    stderr: () => stderr,
    waitForLog,
    metrics: async () => {
      const res = await fetch(`${url}/metrics`)
      if (res.status !== 200) throw new Error(`GET /metrics: ${res.status}`)
      return new Metrics(await res.text())
    },
    exited,
    stop: () => signalAndWait('SIGTERM'),
    kill: () => signalAndWait('SIGKILL'),
  }
}

function describeLogs(logs: Array<Record<string, unknown>>, stderr: string): string {
  return [...logs.slice(-20).map((l) => JSON.stringify(l)), stderr.slice(-2000)].join('\n')
}

async function withTimeout<T>(p: Promise<T>, ms: number, message: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message())), ms)))])
  } finally {
    clearTimeout(timer)
  }
}

export interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

/** Parsed Prometheus text exposition (the sample lines; HELP/TYPE comments are skipped). */
export class Metrics {
  readonly samples: Sample[]

  constructor(readonly text: string) {
    this.samples = []
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue
      const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line)
      if (!m) continue
      this.samples.push({ name: m[1]!, labels: parseLabels(m[2] ?? ''), value: Number(m[3]) })
    }
  }

  /** Every series of `name` whose labels include `labels`. */
  series(name: string, labels: Record<string, string> = {}): Sample[] {
    return this.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
  }

  has(name: string): boolean {
    return this.samples.some((s) => s.name === name)
  }

  /** A gauge or counter: the sum over matching series (0 when none). */
  value(name: string, labels: Record<string, string> = {}): number {
    return this.series(name, labels).reduce((sum, s) => sum + s.value, 0)
  }

  /** A histogram's observation count. */
  count(name: string, labels: Record<string, string> = {}): number {
    return this.value(`${name}_count`, labels)
  }

  /** A histogram's cumulative count of observations ≤ `le`. */
  bucket(name: string, le: string, labels: Record<string, string> = {}): number {
    return this.value(`${name}_bucket`, { ...labels, le })
  }
}

function parseLabels(s: string): Record<string, string> {
  const out: Record<string, string> = {}
  const re = /([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g
  let m: RegExpExecArray | null
  while ((m = re.exec(s)) !== null) out[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
  return out
}

/**
 * Polls `probe` until it returns a value `done` accepts; bounded by `timeoutMs`. The error names
 * the last value seen, so a failing wait says what the state was.
 */
export async function pollUntil<T>(probe: () => Promise<T>, done: (v: T) => boolean, what: string, timeoutMs = 10_000, intervalMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: T | undefined
  for (;;) {
    last = await probe()
    if (done(last)) return last
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(last)}`)
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}
