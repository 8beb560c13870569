/**
 * Engine scenario 4, over HTTP, against a real GPU node process (small model, default settings):
 * idle TTFT minus the prefill step's duration (the node's zl_step_duration_seconds sum delta, one
 * step, for a max_tokens 1 request), and the socket thread's event-loop delay p99 under full load
 * (monitorEventLoopDelay preloaded into the node process, bench/rig/event-loop-delay.ts), with a
 * /healthz probe latency alongside.
 */
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { benchAgent, sendRequest, type RequestRecord } from '../load/client.ts'
import { buildBody, type BenchDialect } from '../load/dialects.ts'
import { closedLoop } from '../load/generators.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { chatPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { startGpuNode } from '../lib/services.ts'
import { median, percentile, round, summarize } from '../lib/stats.ts'
import { NEW_TOKENS, PROMPT_TOKENS } from './engine-rig.ts'

export async function runOverHttp(ctx: BenchContext, modelDir: string, raw: Record<string, unknown>, notes: string[]): Promise<Record<string, number | null>> {
  ctx.log(`starting a GPU node (${modelDir}, default MAX_BATCH/threads) with the event-loop-delay probe`)
  const node = await startGpuNode({ modelDir, eldProbe: true })
  const agent = benchAgent()
  try {
    const prompt = chatPromptOfLength(modelDir, PROMPT_TOKENS)
    const oneToken = buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: 1, stream: true, ignoreEos: true })
    const send = (body: Uint8Array, dialect: BenchDialect = 'openai-chat', signal?: AbortSignal) => sendRequest({ origin: node.url, dialect, body, stream: true, dispatcher: agent, ...(signal ? { signal } : {}) })
    for (let i = 0; i < 3; i++) await send(oneToken)

    // Idle TTFT minus the prefill step: one request at a time, the node otherwise idle.
    const n = ctx.quick ? 10 : 40
    const diffs: number[] = []
    const ttfts: number[] = []
    const prefills: number[] = []
    let skipped = 0
    let before = parseProm(await node.metricsText())
    for (let i = 0; i < n; i++) {
      await sleep(30)
      const rec = await send(oneToken)
      await sleep(30)
      const after = parseProm(await node.metricsText())
      const steps = promValue(after, 'zl_step_duration_seconds_count') - promValue(before, 'zl_step_duration_seconds_count')
      const stepMs = (promValue(after, 'zl_step_duration_seconds_sum') - promValue(before, 'zl_step_duration_seconds_sum')) * 1000
      before = after
      if (rec.status !== 200 || rec.ttftMs === undefined || steps !== 1) {
        skipped++
        continue
      }
      ttfts.push(rec.ttftMs)
      prefills.push(stepMs)
      diffs.push(rec.ttftMs - stepMs)
    }
    raw.idle = { requests: n, skipped, prompt_tokens: prompt.tokens, ttft_ms: summarize(ttfts), prefill_step_ms: summarize(prefills), ttft_minus_prefill_ms: summarize(diffs) }
    ctx.log(`idle TTFT p50 ${median(ttfts).toFixed(2)} ms, prefill step p50 ${median(prefills).toFixed(2)} ms → TTFT − prefill p50 ${median(diffs).toFixed(2)} ms`)

    // Full load: twice MAX_BATCH streams, closed loop, both dialects; the probe histogram and a /healthz probe.
    const concurrency = 64
    const durationMs = ctx.quick ? 6000 : 30_000
    const bodies: Record<string, Uint8Array> = {
      'openai-chat': buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: NEW_TOKENS, stream: true, ignoreEos: true }),
      'anthropic-messages': buildBody('anthropic-messages', { model: node.model, text: prompt.text, maxTokens: NEW_TOKENS, stream: true, ignoreEos: true }),
    }
    ctx.log(`full load: ${concurrency} concurrent streams (OpenAI chat and Anthropic messages) for ${durationMs / 1000} s`)
    await node.eld!.reset()
    const probeLatencies: number[] = []
    let probing = true
    const probe = (async () => {
      while (probing) {
        const t0 = performance.now()
        try {
          const res = await fetch(`${node.url}/healthz`, { signal: AbortSignal.timeout(5000) })
          await res.arrayBuffer()
          probeLatencies.push(performance.now() - t0)
        } catch { /* counted by absence */ }
        await sleep(25)
      }
    })()
    const load = await closedLoop<RequestRecord>({
      concurrency,
      durationMs,
      graceMs: 3000,
      run: (i, signal) => {
        const dialect: BenchDialect = i % 2 === 0 ? 'openai-chat' : 'anthropic-messages'
        return send(bodies[dialect], dialect, signal)
      },
    })
    const eld = await node.eld!.read()
    probing = false
    await probe
    const recs = load.results
    const ok = recs.filter((r) => r.status === 200 && !r.error && !r.cutOff)
    const tokens = recs.reduce((s, r) => s + r.tokens, 0)
    raw.full_load = {
      concurrency,
      duration_ms: durationMs,
      requests: recs.length,
      completed: ok.length,
      errors: recs.filter((r) => r.error).length,
      cut_off: recs.filter((r) => r.cutOff).length,
      client_tokens_per_s: round((tokens * 1000) / load.endedAtMs),
      ttft_ms: summarize(ok.map((r) => r.ttftMs!).filter((x) => x !== undefined)),
      inter_token_ms: summarize(ok.flatMap((r) => r.gapsMs)),
      event_loop_delay_ms: { resolution_ms: eld.resolutionMs, samples: eld.count, p50: round(eld.p50), p90: round(eld.p90), p99: round(eld.p99), max: round(eld.max) },
      healthz_probe_ms: summarize(probeLatencies),
    }
    ctx.log(`event-loop delay on the socket thread: p50 ${eld.p50.toFixed(2)} ms, p99 ${eld.p99.toFixed(2)} ms, max ${eld.max.toFixed(1)} ms; /healthz probe p99 ${percentile(probeLatencies, 99).toFixed(2)} ms; ${(tokens * 1000 / load.endedAtMs).toFixed(0)} tok/s`)
    notes.push('Event-loop delay: perf_hooks.monitorEventLoopDelay inside the GPU node process (preloaded by the benchmark, bench/rig/event-loop-delay.ts), reported as lateness of a 2 ms timer; a /healthz probe latency is reported beside it.')
    notes.push('Idle TTFT minus prefill: client TTFT (first content frame, max_tokens 1) minus the one step the node ran for it (zl_step_duration_seconds sum delta: the worker round trip of the prefill step).')
    return {
      idle_ttft_minus_prefill_ms: round(median(diffs)),
      event_loop_delay_p99_ms: round(eld.p99),
    }
  } finally {
    await agent.close()
    await node.stop()
  }
}
