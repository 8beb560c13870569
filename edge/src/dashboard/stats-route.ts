/**
 * GET /v1/stats/latency?window=15m[&region=…][&edge=…]: percentiles, rates and a time series
 * from the latency histograms (shape: latency-stats.ts, documented in edge/README.md). An API
 * key sees its own tenant's requests, ADMIN_TOKEN everyone's (authenticate with allowAdmin).
 */
import type { Context } from 'hono'
import { ApiError } from '../../../shared/src/api-error.ts'
import type { AppEnv } from '../context.ts'
import type { StatsScope } from '../latency/latency-keys.ts'
import type { LatencyReader } from '../latency/redis-latency-store.ts'
import { computeLatencyStats, statsRange } from './latency-stats.ts'
import { LatencyStatsQuery } from './stats-query.ts'

export function latencyStats(reader: LatencyReader | undefined, now: () => number) {
  return async (c: Context<AppEnv>): Promise<Response> => {
    if (!reader) throw new ApiError('not_found', 'Latency statistics are not enabled on this edge.')
    const parsed = LatencyStatsQuery.safeParse(c.req.query())
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!
      const param = issue.path.map(String).join('.') || 'query'
      throw new ApiError('invalid_request', `Invalid query parameter '${param}': ${issue.message}.`, { param })
    }
    const principal = c.get('principal')
    const scope: StatsScope = principal.admin ? { kind: 'all' } : { kind: 'tenant', tenant: principal.tenant }
    const range = statsRange(parsed.data.window.minutes, now())
    let hashes
    try {
      hashes = await reader.read(scope, range.resolution, range.first, range.last)
    } catch (e) {
      throw new ApiError('overloaded', 'Latency statistics are temporarily unavailable; please retry.', { retryAfterMs: 1000, cause: e })
    }
    return c.json(computeLatencyStats({ hashes, range, query: parsed.data, scope }), 200, { 'cache-control': 'no-store' })
  }
}
