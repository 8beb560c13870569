/**
 * Rate-limit check latency: the edge's own limit store (edge/src/limits/
 * upstash-limit-store.ts: @upstash/ratelimit over @upstash/redis, configured as the edge
 * configures it: no retries, no auto-pipelining) against the local Upstash bridge over a real
 * redis-server (infra/local/local-upstash.ts), one check at a time after a warm-up. The figure is
 * the p50 of the requests/minute check (sliding window); the tokens/minute charge (token bucket)
 * is reported beside it.
 */
import { performance } from 'node:perf_hooks'
import { Redis } from '@upstash/redis'
import { createUpstashLimitStore } from '../../edge/src/limits/upstash-limit-store.ts'
import { startLocalUpstash } from '../../infra/local/local-upstash.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { median, round, summarize } from '../lib/stats.ts'

export async function runRatelimit(ctx: BenchContext): Promise<SectionResult> {
  ctx.log('starting redis-server and the Upstash bridge (in this process)')
  const upstash = await startLocalUpstash({ token: 'zl-bench-upstash-token' })
  try {
    const redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, retry: false, enableAutoPipelining: false, enableTelemetry: false })
    const store = createUpstashLimitStore(redis)
    const rounds = ctx.quick ? 2 : 5
    const n = ctx.quick ? 150 : 400
    const rpm = 1_000_000_000
    const tpm = 1_000_000_000_000
    for (let i = 0; i < 30; i++) {
      await store.requests('key_bench', rpm)
      await store.tokens('key_bench', tpm, 100)
    }
    const reqMs: number[] = []
    const tokMs: number[] = []
    const p50s: number[] = []
    for (let r = 0; r < rounds; r++) {
      const roundReq: number[] = []
      for (let i = 0; i < n; i++) {
        let t0 = performance.now()
        const a = await store.requests('key_bench', rpm)
        roundReq.push(performance.now() - t0)
        t0 = performance.now()
        const b = await store.tokens('key_bench', tpm, 100)
        tokMs.push(performance.now() - t0)
        if (!a.success || !b.success) throw new Error('the limiter refused a request under huge limits')
      }
      reqMs.push(...roundReq)
      p50s.push(median(roundReq))
      ctx.log(`round ${r + 1}/${rounds}: requests/min check p50 ${median(roundReq).toFixed(3)} ms`)
    }
    return {
      figures: { check_ms_p50: round(median(p50s)) },
      raw: { rounds, checks_per_round: n, requests_check_ms: summarize(reqMs), tokens_charge_ms: summarize(tokMs), p50_per_round: p50s.map((x) => round(x)) },
      notes: ['Rate-limit checks: the bridge runs in the benchmark process (startLocalUpstash), one check at a time; each check is one HTTP request to the bridge and one EVALSHA in redis-server.'],
    }
  } finally {
    await upstash.stop()
  }
}
