/**
 * CPU cost per request in instructions: the Node edge and the bare Hono
 * passthrough, each in its own process under valgrind's callgrind (bench/lib/callgrind.ts),
 * pinned to core 0, one after the other in the same run, in front of the instant upstream
 * (core 1, with the load generator, the Upstash bridge and redis). Through the edge: auth, both
 * rate limits (real redis-server + the bridge), validation and signing, as in production.
 *
 * The bare passthrough runs twice: over an HTTP/1.1 pool, and over one h2c connection as the
 * edge does (`UPSTREAM_H2=1`), so the protocol's share of the gap is counted apart from ours.
 *
 * Per proxy and request kind (non-streaming ~1 kB, streaming ~1 kB, non-streaming ~100 kB):
 * - warm-up: `warm` requests of every kind first, with callgrind's instrumentation off (fast), so
 *   V8 has tiered the path up (optimised code) before anything is counted;
 * - count: BATCHES times, zero the counters, send N requests one at a time, dump; per request =
 *   count / N. (Differencing N and 2N batches was tried first: it doubled the variance, and the
 *   zero/dump pair costs nothing next to N requests.)
 * - clock-driven work apart: a batch's count is its requests' own work plus what the process
 *   does per second of wall time while it serves — the limiter's lease refills, the registry
 *   refresh and the latency batch's write, each about once a second whatever the load. Under
 *   callgrind a request takes ~10–25 ms of wall time where it takes ~0.2 ms natively, so that
 *   work lands on ~50× fewer requests than on a native edge, and with each batch's pace it moved
 *   the edge's count by ±10 % between batches. So BATCHES more batches (N / 2 requests) are sent
 *   at a slower pace (PACE_GAP_MS idle after each request); the slope of count per request
 *   against wall ms per request between plain and paced batches (clockSlopeOf) is the
 *   clock-driven rate (`clock_per_s`, instructions per second of serving), and each batch's own
 *   work is its count less slope × its wall time. The figure is the median of those over all
 *   batches, their spread is reported; the plain medians (clock-driven work included at
 *   callgrind's pace) beside it.
 * Counted on the main thread (the request path and its share of GC); V8's compiler and GC helper
 * threads, which run in bursts, are reported beside it (all threads).
 * The figure `instructions_per_request_over_bare` is edge ÷ bare for the non-streaming kind.
 */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { benchAgent, sendRequest } from '../load/client.ts'
import { buildBody } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'
import { buildNodeEdge } from '../../infra/build/edge-node.ts'
import { bundleEntry } from '../lib/bundle.ts'
import { CallgrindCounter, callgrindWrap, hasCallgrind } from '../lib/callgrind.ts'
import { hasTaskset, pinSelf } from '../lib/procs.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startBarePassthrough, startNodeEdge, type EdgeProc } from '../lib/services.ts'
import { median, round } from '../lib/stats.ts'

/** Batches of N requests counted per kind; the figure is their median (see the file comment). */
const BATCHES = 4
const IDLE_MS = 5000
/** Idle after each request of a paced batch: its wall time per request is ~5–10× a plain batch's. */
const PACE_GAP_MS = 100
import type { PinnedEdgeInput, PinnedEdgeResult } from './edge-pinned.ts'

export const REQUEST_KINDS = ['non_streaming_1kb', 'streaming_1kb', 'non_streaming_100kb'] as const
/**
 * The edge and two bare passthroughs: to the upstream over an HTTP/1.1 pool (the framework's
 * floor, the target's reference; the edge reaches the nodes of its own region over HTTP/1.1
 * too), and over one h2c connection, as the edge reaches other regions' nodes: between the two
 * is what HTTP/2 costs.
 */
const PROXIES = ['edge', 'bare', 'bare_h2'] as const
type Proxy = (typeof PROXIES)[number]
export type RequestKind = (typeof REQUEST_KINDS)[number]

export interface KindCount {
  /** Instructions per request, per batch (plain batches, then paced ones), clock-driven work included. */
  repeats: number[]
  /** Each batch's wall time per request, ms. */
  wall_ms: number[]
  /** Median over the plain batches, clock-driven work included at callgrind's pace. */
  median_with_clock: number
  /** Instructions per second of serving (clockSlopeOf over the batches). */
  clock_per_s: number
  /** The request's own work: median over all batches of count per request − clock_per_s × wall time. */
  median: number
  /** (max − min) / median over the batches' own work. */
  spread: number
  /** The same with V8's compiler and GC helper threads included. */
  all_threads_repeats: number[]
}

export function requestBodies(model: string): Record<RequestKind, { body: Uint8Array; stream: boolean }> {
  const text = (bytes: number) => 'lorem ipsum dolor sit amet '.repeat(Math.ceil(bytes / 27)).slice(0, bytes)
  return {
    non_streaming_1kb: { body: buildBody('openai-chat', { model, text: text(900), maxTokens: 16, stream: false }), stream: false },
    streaming_1kb: { body: buildBody('openai-chat', { model, text: text(900), maxTokens: 16, stream: true }), stream: true },
    non_streaming_100kb: { body: buildBody('openai-chat', { model, text: text(100_000), maxTokens: 16, stream: false }), stream: false },
  }
}

export async function runEdgeInstructions(ctx: BenchContext, input: PinnedEdgeInput): Promise<PinnedEdgeResult> {
  if (!hasCallgrind()) {
    return { figures: { instructions_per_request_over_bare: null }, raw: {}, notes: ['instruction counts: valgrind (callgrind) is not installed (apt-get install -y valgrind); skipped'] }
  }
  // Counted under callgrind a request costs ~0.1 s of CPU (JIT code is re-translated as V8
  // rewrites it); the warm-up runs uninstrumented (callgrind.ts). The quick run counts fewer
  // requests and leaves the 100 kB kind out.
  const n = ctx.quick ? 60 : 100
  const warm = ctx.quick ? 1500 : 3000
  const kindsCounted = ctx.quick ? REQUEST_KINDS.filter((k) => k !== 'non_streaming_100kb') : [...REQUEST_KINDS]
  const kinds = requestBodies(input.model)
  const pinned = hasTaskset()
  const unpinSelf = pinned ? pinSelf('1') : () => {}
  const agent = benchAgent()
  const counts: Record<Proxy, Partial<Record<RequestKind, KindCount>>> = { edge: {}, bare: {}, bare_h2: {} }
  const notes: string[] = []
  const idlePerS: Partial<Record<Proxy, { main: number; all: number }>> = {}
  const batchWallMs: Partial<Record<Proxy, number[]>> = {}
  try {
    for (const which of PROXIES) {
      const dir = mkdtempSync(join(tmpdir(), 'zl-bench-callgrind-'))
      const outFile = join(dir, `${which}.out`)
      // Each proxy built as it runs outside the bench: the edge by infra/build/edge-node.ts, the
      // passthrough by bundle.ts, both esbuild bundles (tsx's loader under valgrind takes minutes).
      const bundle = which === 'edge' ? await buildNodeEdge(join(dir, 'edge')) : bundleEntry('bench/rig/bare-hono-passthrough.ts', join(dir, `${which}.mjs`))
      const opts = { wrap: callgrindWrap(outFile), bundle, readyTimeoutMs: 600_000, ...(pinned ? { cpus: '0' } : {}) }
      const t0 = performance.now()
      // Under callgrind every step takes ~100× its wall time: the limiter's and the upstream's
      // timeouts are raised so that a slow process is not mistaken for a slow store or node.
      const slowEnv = { ...input.edgeEnv, RATE_LIMIT_TIMEOUT_MS: '60000', UPSTREAM_CONNECT_TIMEOUT_MS: '120000' }
      const proc: EdgeProc = which === 'edge' ? await startNodeEdge(slowEnv, opts) : await startBarePassthrough(input.instantUrl, { ...opts, h2: which === 'bare_h2' })
      try {
        const counter = new CallgrindCounter(proc.proc.pid, outFile)
        const headers: Record<string, string> = which === 'edge' ? { authorization: `Bearer ${input.apiKey}` } : {}
        const send = async (kind: RequestKind) => {
          const { body, stream } = kinds[kind]
          const rec = await sendRequest({ origin: proc.url, dialect: 'openai-chat', body, stream, headers, dispatcher: agent, timeoutMs: 120_000 })
          if (rec.status !== 200 || rec.error) throw new Error(`${which} under callgrind: ${kind} answered ${rec.error ?? `HTTP ${rec.status}`}`)
        }
        ctx.log(`instructions: ${which} started under callgrind (${((performance.now() - t0) / 1000).toFixed(0)} s); warming up with ${warm} requests of each kind`)
        for (const kind of kindsCounted) {
          const w0 = performance.now()
          await closedLoop({ concurrency: 4, durationMs: 900_000, graceMs: 60_000, maxRequests: warm, run: () => send(kind) })
          ctx.log(`instructions: ${which} warmed up on ${kind} (${((performance.now() - w0) / 1000).toFixed(0)} s)`)
        }
        counter.instrument()
        for (const kind of kindsCounted) {
          const repeats: number[] = []
          const repeatsAll: number[] = []
          const wallMs: number[] = []
          for (let rep = 0; rep < 2 * BATCHES; rep++) {
            const paced = rep >= BATCHES
            const size = paced ? Math.ceil(n / 2) : n
            counter.zero()
            const b0 = performance.now()
            for (let i = 0; i < size; i++) {
              await send(kind)
              if (paced) await sleep(PACE_GAP_MS)
            }
            const c = counter.dump()
            wallMs.push((performance.now() - b0) / size)
            if (!paced) (batchWallMs[which] ??= []).push(wallMs.at(-1)!)
            repeats.push(c.main / size)
            repeatsAll.push(c.all / size)
          }
          const clockPerMs = clockSlopeOf(wallMs, repeats, BATCHES)
          const own = repeats.map((y, i) => y - clockPerMs * wallMs[i]!)
          const mid = median(own)
          counts[which][kind] = {
            repeats: repeats.map((x) => Math.round(x)),
            wall_ms: wallMs.map((w) => round(w, 1)),
            median_with_clock: Math.round(median(repeats.slice(0, BATCHES))),
            clock_per_s: Math.round(clockPerMs * 1000),
            median: Math.round(mid),
            spread: round((Math.max(...own) - Math.min(...own)) / mid, 4),
            all_threads_repeats: repeatsAll.map((x) => Math.round(x)),
          }
          ctx.log(`instructions: ${which} ${kind}: main thread ${repeats.map((x, i) => `${Math.round(x).toLocaleString('en')} (${wallMs[i]!.toFixed(0)} ms)`).join(' / ')} per request; clock-driven ${Math.round(clockPerMs * 1000).toLocaleString('en')} per s; own work ${Math.round(mid).toLocaleString('en')}`)
        }
        // What the process does with no requests at all, per second of wall time. Reported beside
        // clock_per_s, which is more: lease refills, the registry refresh and the latency batch's
        // write only happen while requests come.
        counter.zero()
        const i0 = performance.now()
        await sleep(IDLE_MS)
        const idle = counter.dump()
        idlePerS[which] = { main: Math.round(idle.main / ((performance.now() - i0) / 1000)), all: Math.round(idle.all / ((performance.now() - i0) / 1000)) }
        ctx.log(`instructions: ${which} idle: ${idlePerS[which]!.main.toLocaleString('en')} per second (main thread)`)
      } finally {
        await proc.stop()
      }
    }
  } finally {
    unpinSelf()
    await agent.close()
  }
  const ratio = (k: RequestKind, bare: Proxy = 'bare', of: Proxy = 'edge', count: 'median' | 'median_with_clock' = 'median') => round(counts[of][k]![count] / counts[bare][k]![count])
  const spreads = kindsCounted.flatMap((k) => PROXIES.map((p) => counts[p][k]!.spread))
  if (Math.max(...spreads) > 0.01) notes.push(`instruction counts: batches of one kind differed by up to ${(Math.max(...spreads) * 100).toFixed(1)} % of their median (target ≤ 1 %)`)
  return {
    figures: { instructions_per_request_over_bare: ratio('non_streaming_1kb'), instructions_per_request_over_bare_h2: ratio('non_streaming_1kb', 'bare_h2') },
    raw: {
      method: `callgrind (main thread; all threads beside it), each proxy bundled (esbuild) and on core 0; ${warm} warm-up requests of each kind, then per kind ${BATCHES} batches of N = ${n} requests one at a time and ${BATCHES} of N / 2 with ${PACE_GAP_MS} ms idle after each, counters zeroed before each; clock_per_s = median slope of count / N against wall ms per request between plain and paced batches, at least 0; per request = median over batches of count / N − slope × wall ms per request`,
      per_request: counts,
      idle_per_s: idlePerS,
      wall_ms_per_counted_request: Object.fromEntries(Object.entries(batchWallMs).map(([k, v]) => [k, round(median(v), 1)])),
      edge_over_bare: Object.fromEntries(kindsCounted.map((k) => [k, ratio(k)])),
      // The previous method's figure: clock-driven work included at callgrind's pace.
      edge_over_bare_with_clock: Object.fromEntries(kindsCounted.map((k) => [k, ratio(k, 'bare', 'edge', 'median_with_clock')])),
      edge_over_bare_h2: Object.fromEntries(kindsCounted.map((k) => [k, ratio(k, 'bare_h2')])),
      bare_h2_over_bare: Object.fromEntries(kindsCounted.map((k) => [k, ratio(k, 'bare', 'bare_h2')])),
      edge_minus_bare: Object.fromEntries(kindsCounted.map((k) => [k, counts.edge[k]!.median - counts.bare[k]!.median])),
    },
    notes,
  }
}

/**
 * The clock-driven rate through the batches (Theil–Sen, restricted to pairs of one plain and one
 * paced batch, whose wall times differ ~10×): the median of the slopes between them, robust to an
 * odd batch (the first after instrumentation starts often is one); never below 0, as a process
 * cannot take instructions back.
 */
function clockSlopeOf(wallMs: readonly number[], counts: readonly number[], plain: number): number {
  const slopes: number[] = []
  for (let p = 0; p < plain; p++) for (let q = plain; q < wallMs.length; q++) slopes.push((counts[q]! - counts[p]!) / (wallMs[q]! - wallMs[p]!))
  return Math.max(0, median(slopes))
}
