/**
 * Instruction counts of a running process under valgrind's callgrind: on this
 * shared machine they repeat where CPU seconds do not. The process runs under `callgrindWrap()`;
 * `zero()` resets its counters (after a warm-up, so start-up and JIT tier-up are left out) and
 * `dump()` writes the instructions executed since then, summed over all its threads (V8's
 * compiler and GC threads included: they are the request's cost too), and returns the count.
 * Both go through `callgrind_control`, which reaches the process through valgrind's gdbserver.
 * Its FIFOs are named after the process's $USER and $HOST (and the edge's HOST is its listen
 * address), so callgrind_control runs with the target's own values, read from /proc.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'

export const VALGRIND_BIN = '/usr/bin/valgrind'

export function hasCallgrind(): boolean {
  return existsSync(VALGRIND_BIN) && spawnSync('callgrind_control', ['-h'], { encoding: 'utf8' }).status === 0
}

/**
 * The command a node process runs under. Instrumentation starts off (`--instr-atstart=no`): the
 * process starts and warms up at valgrind's plain speed (a few times native, where callgrind's
 * full instrumentation is ~100×), so V8 can tier the request path up over thousands of requests;
 * `instrument()` turns it on before counting.
 */
export function callgrindWrap(outFile: string): string[] {
  // No per-line or per-instruction detail: only the totals are read, and dumps stay small.
  // Threads apart: the main thread (the requests' own path, its GC included) is the figure; V8's
  // compiler and GC helper threads come and go in bursts and are reported beside it.
  return [VALGRIND_BIN, '--tool=callgrind', `--callgrind-out-file=${outFile}`, '--separate-threads=yes', '--instr-atstart=no', '--dump-line=no', '--dump-instr=no', '--compress-pos=yes', '--vgdb=yes']
}

export class CallgrindCounter {
  private dumps = 0
  private readonly env: NodeJS.ProcessEnv
  constructor(
    private readonly pid: number,
    private readonly outFile: string,
  ) {
    const target = environOf(pid)
    this.env = { ...process.env, HOST: target.HOST ?? '', USER: target.USER ?? '', LOGNAME: target.LOGNAME ?? '' }
    for (const k of ['HOST', 'USER', 'LOGNAME'] as const) if (target[k] === undefined) delete this.env[k]
  }

  /** Turns instrumentation on (after the warm-up); counters are zeroed with it. */
  instrument(): void {
    control(['-i', 'on', String(this.pid)], this.env)
    this.zero()
  }

  zero(): void {
    control(['-z', String(this.pid)], this.env)
  }

  /** Instructions executed since the last zero() (or dump()): the main thread's, and all threads'. */
  dump(): { main: number; all: number } {
    control(['-d', String(this.pid)], this.env)
    const part = ++this.dumps
    // With --separate-threads=yes, one file per thread: <out>.<part>-<thread>, thread 01 the main one.
    const prefix = `${basename(this.outFile)}.${part}-`
    const files = readdirSync(dirname(this.outFile)).filter((f) => f.startsWith(prefix))
    if (files.length === 0) throw new Error(`callgrind dump ${part} of ${this.outFile}: no files`)
    let main = 0
    let all = 0
    for (const f of files) {
      const path = join(dirname(this.outFile), f)
      const text = readFileSync(path, 'utf8')
      rmSync(path, { force: true })
      const m = /^summary:\s+(\d+)/m.exec(text) ?? /^totals:\s+(\d+)/m.exec(text)
      if (!m) throw new Error(`callgrind dump ${path}: no summary line`)
      all += Number(m[1])
      if (f.endsWith('-01')) main = Number(m[1])
    }
    return { main, all }
  }
}

function environOf(pid: number): Record<string, string | undefined> {
  const out: Record<string, string> = {}
  for (const kv of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const eq = kv.indexOf('=')
    if (eq > 0) out[kv.slice(0, eq)] = kv.slice(eq + 1)
  }
  return out
}

function control(args: string[], env: NodeJS.ProcessEnv): void {
  const r = spawnSync('callgrind_control', args, { encoding: 'utf8', timeout: 120_000, env })
  if (r.status !== 0 || !/OK/.test(r.stdout)) throw new Error(`callgrind_control ${args.join(' ')} failed: ${(r.stdout + r.stderr).trim().slice(0, 300)}`)
}
