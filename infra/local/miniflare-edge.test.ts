/**
 * The Miniflare edge keeps `wrangler dev`'s config semantics: wrangler.toml's [vars] with the env
 * file on top (as `--env-file` does), its Text module rules, request.cf offline, the Worker's
 * console output on stdout (where the stack's supervisor takes it for edge.log), and a rebuild when a watched source changes.
 */
import { spawn } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { startMiniflareEdge, type MiniflareEdge } from './miniflare-edge.ts'

const FIXTURE = join(import.meta.dirname, 'test-fixtures', 'vars-worker')
let dir: string
let edge: MiniflareEdge
let cfFetchBefore: string | undefined

beforeAll(async () => {
  // A copy: the rebuild test edits a source file.
  dir = mkdtempSync(join(tmpdir(), 'zl-miniflare-edge-test-'))
  cpSync(FIXTURE, dir, { recursive: true })
  writeFileSync(join(dir, 'edge.env'), "OVERRIDDEN='env file'\nFROM_ENV_FILE='{\"a\":[1]}'\n")
  // Offline request.cf, as the stack runs it (FACTS.md); restored after.
  cfFetchBefore = process.env.CLOUDFLARE_CF_FETCH_ENABLED
  process.env.CLOUDFLARE_CF_FETCH_ENABLED = 'false'
  edge = await startMiniflareEdge({ config: join(dir, 'wrangler.toml'), ip: '127.0.0.1', port: 0, envFile: join(dir, 'edge.env'), watchDirs: [dir] })
}, 120_000)

afterAll(async () => {
  await edge?.dispose()
  if (cfFetchBefore === undefined) delete process.env.CLOUDFLARE_CF_FETCH_ENABLED
  else process.env.CLOUDFLARE_CF_FETCH_ENABLED = cfFetchBefore
  rmSync(dir, { recursive: true, force: true })
})

const get = async () => (await (await fetch(`${edge.url}/probe`, { signal: AbortSignal.timeout(10_000) })).json()) as Record<string, unknown>

describe('the Miniflare edge', () => {
  it('serves the wrangler build with [vars], the env file on top, Text modules and the offline request.cf', async () => {
    expect(edge.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(await get()).toEqual({ FROM_TOML: 'toml', OVERRIDDEN: 'env file', FROM_ENV_FILE: '{"a":[1]}', greeting: '<p>hello</p>\n', version: 1, cfColo: 'DFW' })
  })

  it("runs as a process (the stack's supervisor) that prints its ready line and the Worker's console output on stdout", async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'miniflare-edge-cli.ts'), '--config', join(dir, 'wrangler.toml'), '--ip', '127.0.0.1', '--port', '0', '--env-file', join(dir, 'edge.env'), '--no-watch'], {
      env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: 'false' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')))
    try {
      const ready = await vi.waitFor(
        () => {
          const line = out.split('\n').find((l) => l.includes('"miniflare edge ready"'))
          expect(line).toBeDefined()
          return JSON.parse(line!) as { url: string }
        },
        { timeout: 60_000, interval: 100 },
      )
      const res = await fetch(`${ready.url}/logged`, { signal: AbortSignal.timeout(10_000) })
      expect(res.status).toBe(200)
      await vi.waitFor(() => expect(out).toContain('{"msg":"vars-worker request","path":"/logged"}'), { timeout: 10_000, interval: 50 })
    } finally {
      child.kill('SIGTERM')
      await new Promise((resolve) => child.once('exit', resolve))
    }
  }, 90_000)

  it('gives workerd the V8 flags it is started with (through its config, as Miniflare has no option for them)', async () => {
    // These edges build and keep their state in a copy of the fixture: wrangler's build writes
    // beside its config, and a write in the watched directory would rebuild the suite's edge.
    const state = mkdtempSync(join(tmpdir(), 'zl-miniflare-edge-flags-'))
    cpSync(dir, state, { recursive: true })
    const gc = async (url: string) => ((await (await fetch(`${url}/gc`, { signal: AbortSignal.timeout(10_000) })).json()) as { gc: string }).gc
    // The default (--optimize-for-size) does not expose gc(); an edge given --expose-gc does.
    expect(await gc(edge.url)).toBe('undefined')
    const exposed = await startMiniflareEdge({ config: join(state, 'wrangler.toml'), ip: '127.0.0.1', port: 0, envFile: join(state, 'edge.env'), watch: false, persistTo: join(state, 'gc'), v8Flags: ['--optimize-for-size', '--expose-gc'] })
    try {
      expect(await gc(exposed.url)).toBe('function')
      expect(exposed.workerdPath).toMatch(/workerd-v8-flags\.sh$/)
    } finally {
      await exposed.dispose()
    }
    // None: workerd as Miniflare starts it by itself.
    const plain = await startMiniflareEdge({ config: join(state, 'wrangler.toml'), ip: '127.0.0.1', port: 0, envFile: join(state, 'edge.env'), watch: false, persistTo: join(state, 'plain'), v8Flags: [] })
    try {
      expect(await gc(plain.url)).toBe('undefined')
      expect(plain.workerdPath).not.toMatch(/workerd-v8-flags\.sh$/)
    } finally {
      await plain.dispose()
      rmSync(state, { recursive: true, force: true })
    }
  }, 120_000)

  it('rebuilds when a watched source changes', async () => {
    writeFileSync(join(dir, 'version.ts'), 'export const VERSION = 2\n')
    await vi.waitFor(async () => expect((await get()).version).toBe(2), { timeout: 60_000, interval: 200 })
    expect(readFileSync(join(dir, 'version.ts'), 'utf8')).toContain('2')
  }, 70_000)
})
