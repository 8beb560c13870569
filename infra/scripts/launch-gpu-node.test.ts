import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { describe, expect, it } from 'vitest'

/** Starts `npm run gpu-node`'s launcher on a free port and resolves with its parsed JSON log lines as they come. */
function launch(env: Record<string, string>): { child: ChildProcess; line: (pred: (l: Record<string, unknown>) => boolean) => Promise<Record<string, unknown>>; exit: Promise<number | null> } {
  const child = spawn(process.execPath, ['infra/scripts/launch-gpu-node.mjs'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  const seen: Array<Record<string, unknown>> = []
  const waiters: Array<{ pred: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }> = []
  createInterface({ input: child.stdout! }).on('line', (text) => {
    let parsed: Record<string, unknown>
    try {
      parsed = JSON.parse(text) as Record<string, unknown>
    } catch {
      return
    }
    seen.push(parsed)
    for (const w of [...waiters]) if (w.pred(parsed)) (waiters.splice(waiters.indexOf(w), 1), w.resolve(parsed))
  })
  const line = (pred: (l: Record<string, unknown>) => boolean) =>
    new Promise<Record<string, unknown>>((resolve) => {
      const hit = seen.find(pred)
      if (hit) resolve(hit)
      else waiters.push({ pred, resolve })
    })
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  return { child, line, exit }
}

describe('launch-gpu-node', () => {
  it('starts the node with the malloc environment, forwards SIGTERM, and exits 0 after draining', async () => {
    // Unset whatever the outer environment might point at (a real registry, TLS files).
    const isolated = { UPSTASH_REDIS_REST_URL: '', UPSTASH_REDIS_REST_TOKEN: '', TLS_CERT: '', TLS_KEY: '', PUBLIC_URL: '' }
    const { child, line, exit } = launch({ ...isolated, ALLOW_UNSIGNED: '1', PORT: '0', HOST: '127.0.0.1', REGION: 'test', MODEL_DIR: 'models/tiny' })
    const ready = await Promise.race([line((l) => l.msg === 'ready'), exit.then((code) => Promise.reject(new Error(`node exited with ${code} before ready`)))])
    expect(ready).toMatchObject({ region: 'test' })
    const res = await fetch(`${String(ready.url)}/readyz`)
    expect(res.status).toBe(200)
    // glibc reads these only at process start: they must be in the node process's own environment.
    const vars = readFileSync(`/proc/${String(ready.pid)}/environ`, 'utf8').split('\0')
    expect(vars).toContain('MALLOC_MMAP_MAX_=0')
    expect(vars).toContain('MALLOC_TRIM_THRESHOLD_=68719476736')
    child.kill('SIGTERM')
    await line((l) => l.msg === 'drained')
    expect(await exit).toBe(0)
  })

  it('exits non-zero with a clear message when the config is invalid', async () => {
    const child = spawn(process.execPath, ['infra/scripts/launch-gpu-node.mjs'], { env: { ...process.env, EDGE_SHARED_SECRET: '', ALLOW_UNSIGNED: '' }, stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()))
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve))
    expect(code).toBe(2)
    expect(stderr).toContain('EDGE_SHARED_SECRET')
  })
})
