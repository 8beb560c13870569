/**
 * The Node edge's build (infra/build/edge-node.ts): one module that runs on its own, out of a
 * folder with nothing else in it, carries the dashboard's files byte for byte, and has none of
 * tsx's keepNames wrappers (the reason it exists).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { transformSync } from 'esbuild'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../local/redis-process.ts'
import { buildNodeEdge } from './edge-node.ts'

const ROOT = join(import.meta.dirname, '..', '..')
const dir = mkdtempSync(join(tmpdir(), 'zl-edge-build-'))
let module: string
let edge: ChildProcess | undefined
let url: string

beforeAll(async () => {
  module = await buildNodeEdge(dir)
  const port = await freePort()
  url = `http://127.0.0.1:${port}`
  // Nothing listens on the Upstash port: the dashboard needs no Redis, and the edge starts without it.
  edge = spawn(process.execPath, [module], {
    cwd: dir,
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: String(port), UPSTASH_REDIS_REST_URL: `http://127.0.0.1:${await freePort()}`, UPSTASH_REDIS_REST_TOKEN: 'unused', EDGE_SHARED_SECRET: 'x'.repeat(32), REQUEST_LOG: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  await new Promise<void>((resolve, reject) => {
    let out = ''
    const onData = (s: Buffer) => {
      out += s.toString()
      if (out.includes('"edge listening"')) resolve()
    }
    edge!.stdout!.on('data', onData)
    edge!.stderr!.on('data', onData)
    edge!.once('exit', (code) => reject(new Error(`the built edge exited (${code}): ${out.slice(-2000)}`)))
  })
})

afterAll(async () => {
  if (edge && edge.exitCode === null) {
    const exited = new Promise((resolve) => edge!.once('exit', resolve))
    edge.kill('SIGTERM')
    await exited
  }
  rmSync(dir, { recursive: true, force: true })
})

describe('the Node edge build', () => {
  it('is one module and its source map, and runs from a folder holding nothing else', () => {
    expect(readdirSync(dir).sort()).toEqual(['node.mjs', 'node.mjs.map'])
    const map = JSON.parse(readFileSync(`${module}.map`, 'utf8')) as { sources: string[] }
    expect(map.sources.some((s) => s.endsWith('edge/src/entries/node-server.ts'))).toBe(true)
  })

  it('serves the dashboard from the copies inside it, the same bytes as the sources', async () => {
    const uplot = readFileSync(createRequire(join(ROOT, 'package.json')).resolve('uplot/dist/uPlot.iife.min.js'), 'utf8')
    const page = readFileSync(join(ROOT, 'edge/src/dashboard/page/dashboard.js'), 'utf8')
    for (const [path, want] of [['/dashboard/uplot.js', uplot], ['/dashboard/dashboard.js', page]] as const) {
      const res = await fetch(url + path)
      expect(res.status).toBe(200)
      expect(await res.text()).toBe(want)
    }
    const html = await fetch(`${url}/dashboard`)
    expect(html.headers.get('content-type')).toMatch(/^text\/html/)
    expect(await html.text()).toBe(readFileSync(join(ROOT, 'edge/src/dashboard/page/index.html'), 'utf8'))
  })

  it('has no keepNames wrapper, which tsx puts around every function expression', () => {
    const built = readFileSync(module, 'utf8')
    expect(built).not.toMatch(/__name\(/)
    // Control: the same source compiled as tsx compiles it (keepNames) is full of them.
    const source = readFileSync(join(ROOT, 'edge/src/proxy/forward.ts'), 'utf8')
    expect(transformSync(source, { loader: 'ts', format: 'esm', keepNames: true }).code).toMatch(/__name\(/)
  })
})
