import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { getPriority, tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { freePort } from './redis-process.ts'
import { Supervisor, type ServiceSpec } from './supervisor.ts'

/** A real child process: an HTTP server that answers 200 on any path. */
function httpService(name: string, port: number, critical: boolean): ServiceSpec {
  return {
    name,
    command: process.execPath,
    args: ['-e', `require('http').createServer((q, s) => s.end('ok')).listen(${port}, '127.0.0.1', () => console.log('listening'))`],
    ready: async () => (await fetch(`http://127.0.0.1:${port}/`)).ok,
    readyTimeoutMs: 10_000,
    critical,
  }
}

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

function supervisor() {
  const dir = mkdtempSync(join(tmpdir(), 'zl-sup-'))
  const status: string[] = []
  const fatal: string[] = []
  const sup = new Supervisor(dir, { status: (l) => status.push(l), fatal: (n, r) => fatal.push(`${n}: ${r}`) })
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }), () => sup.stopAll(2000))
  return { sup, status, fatal }
}

async function until(cond: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('condition not met in time')
    await new Promise((r) => setTimeout(r, 50))
  }
}

describe('Supervisor', () => {
  it('starts a service and waits until it answers', async () => {
    const { sup } = supervisor()
    const port = await freePort()
    await sup.start(httpService('web', port, true))
    expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200)
  })

  it('starts a service at a lower CPU priority when asked, as the process it watches (its pid is the service\'s)', async () => {
    const { sup } = supervisor()
    const port = await freePort()
    await sup.start({ ...httpService('niced', port, false), nice: 7 })
    const pid = sup.pid('niced')!
    expect(getPriority(pid)).toBe(getPriority() + 7)
    expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]).toBe(process.execPath)
  })

  it('restarts a non-critical service that dies (a region outage), after a back-off', async () => {
    const { sup, status, fatal } = supervisor()
    const port = await freePort()
    await sup.start(httpService('node-a', port, false))
    const first = sup.pid('node-a')!
    process.kill(first, 'SIGKILL')
    await until(() => status.some((l) => l.includes('node-a is back')))
    expect(sup.pid('node-a')).not.toBe(first)
    expect(status.some((l) => /node-a killed by SIGKILL; restarting in 1 s/.test(l))).toBe(true)
    expect(fatal).toEqual([])
  })

  it('kills a service on demand and keeps it down for as long as asked before the restart', async () => {
    const { sup, status } = supervisor()
    const port = await freePort()
    await sup.start(httpService('node-b', port, false))
    const killedAt = Date.now()
    sup.kill('node-b', 'SIGKILL', { downForMs: 2500 })
    await until(() => status.some((l) => /node-b killed by SIGKILL; restarting in 3 s/.test(l)))
    await expect(fetch(`http://127.0.0.1:${port}/`)).rejects.toThrow()
    await until(() => status.some((l) => l.includes('node-b is back')))
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(2500)
  })

  it('reports a critical service that dies, with its last log lines', async () => {
    const { sup, fatal } = supervisor()
    const port = await freePort()
    await sup.start(httpService('redis', port, true))
    process.kill(sup.pid('redis')!, 'SIGKILL')
    await until(() => fatal.length === 1)
    expect(fatal[0]).toMatch(/^redis: killed by SIGKILL[\s\S]*listening/)
  })

  it('fails start with the reason when a service exits before it is ready', async () => {
    const { sup } = supervisor()
    const spec: ServiceSpec = { name: 'broken', command: process.execPath, args: ['-e', 'console.error("boom"); process.exit(3)'], ready: async () => false, critical: true }
    await expect(sup.start(spec)).rejects.toThrow(/broken: exited with code 3 before it was ready[\s\S]*boom/)
  })
})
