/**
 * Per-piece instruction counts: one piece of the edge's request path alone in a loop,
 * in its own process under callgrind (bench/lib/callgrind.ts) on core 0, driven over IPC. Per
 * call = (count(2K) − count(K)) / K after a warm-up of 20K calls of the same loop, so start-up,
 * the warm-up and the fixed cost of a dump are outside the figure. Whole-edge batches vary by
 * ±5–10 %; these repeat within a few per cent, so a cut of one piece shows here.
 * - the body check (bench/rig/validate-cost.ts, "Lazy validation"): full (UTF-8 decode +
 *   JSON.parse + the dialect's zod parser), JSON only, the affinity key, the signature's digests,
 *   on the bench's 1 kB and 100 kB bodies;
 * - the upstream client (bench/rig/upstream-cost.ts): one 1 kB POST to the instant upstream and
 *   its answer read whole, through the edge's node:http2 upstream, node:http2 bare, undici's
 *   HTTP/2 Agent it replaced, and undici's HTTP/1.1 Pool; the instant upstream's own work is in
 *   its process.
 */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { bundleEntry } from '../lib/bundle.ts'
import { CallgrindCounter, callgrindWrap, hasCallgrind } from '../lib/callgrind.ts'
import { hasTaskset, spawnProc } from '../lib/procs.ts'
import type { BenchContext } from '../lib/report-types.ts'

interface Loop {
  /** The figure's key. */
  key: string
  /** The probe's IPC command for `count` calls (the count is added). */
  message: Record<string, unknown>
  /** K. */
  k: number
}

/** Counts each loop per call in one probe process; undefined without valgrind. */
async function countLoops(ctx: BenchContext, name: string, probe: string, loops: readonly Loop[], env: Record<string, string> = {}): Promise<Record<string, number> | undefined> {
  if (!hasCallgrind()) return undefined
  const dir = mkdtempSync(join(tmpdir(), 'zl-bench-callgrind-'))
  const outFile = join(dir, `${name}.out`)
  const bundle = bundleEntry(probe, join(dir, `${name}.mjs`))
  const wrap = callgrindWrap(outFile)
  const proc = spawnProc(name, wrap[0]!, [...wrap.slice(1), process.execPath, bundle], { ipc: true, env, ...(hasTaskset() ? { cpus: '0' } : {}) })
  try {
    await proc.waitFor((_l, j) => j?.msg === 'ready', 300_000)
    const counter = new CallgrindCounter(proc.pid, outFile)
    const run = (message: Record<string, unknown>, count: number) =>
      new Promise<void>((resolve, reject) => {
        proc.child.once('message', (m: { done?: boolean; error?: string }) => (m.done ? resolve() : reject(new Error(m.error))))
        proc.child.send({ ...message, count })
      })
    const out: Record<string, number> = {}
    for (const { key, message, k } of loops) {
      await run(message, k * 20)
      counter.instrument()
      await run(message, k)
      const a = counter.dump().main
      await run(message, 2 * k)
      const b = counter.dump().main
      out[key] = Math.round((b - a) / k)
    }
    ctx.log(`${name} per call (instructions): ${Object.entries(out).map(([key, v]) => `${key} ${v.toLocaleString('en')}`).join(', ')}`)
    return out
  } finally {
    await proc.stop()
  }
}

/** The edge's body check and the other costs that grow with the body, per call (validate-cost.ts). */
export function measureValidationCost(ctx: BenchContext): Promise<Record<string, number> | undefined> {
  const loops = ['1kb', '100kb'].flatMap((size) => ['full', 'json', 'affinity', 'sign'].map((mode) => ({ key: `${mode}_${size}`, message: { mode, size }, k: size === '1kb' ? 400 : 40 })))
  return countLoops(ctx, 'validate-cost', 'bench/rig/validate-cost.ts', loops)
}

export const UPSTREAM_CLIENTS = ['h2_upstream', 'node_h2', 'undici_h2', 'h1_upstream', 'undici_h1'] as const

/** One upstream request and its whole answer, per client (upstream-cost.ts), against `upstreamUrl`. */
export function measureUpstreamCost(ctx: BenchContext, upstreamUrl: string): Promise<Record<string, number> | undefined> {
  const loops = UPSTREAM_CLIENTS.map((client) => ({ key: client, message: { client }, k: 200 }))
  return countLoops(ctx, 'upstream-cost', 'bench/rig/upstream-cost.ts', loops, { UPSTREAM_URL: upstreamUrl })
}
