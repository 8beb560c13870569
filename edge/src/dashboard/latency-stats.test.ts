import { describe, expect, it } from 'vitest'
import { bucketBounds, bucketIndex } from '../latency/histogram.ts'
import { bucketOf, fieldName, latencyKey, parseField, type StatsScope } from '../latency/latency-keys.ts'
import type { LatencySample } from '../latency/latency-recorder.ts'
import type { LatencyHash } from '../latency/redis-latency-store.ts'
import { computeLatencyStats, statsRange } from './latency-stats.ts'
import { LatencyStatsQuery } from './stats-query.ts'

const NOW = Date.UTC(2026, 3, 20, 12, 30, 30) // 30 s into a minute
const ALL: StatsScope = { kind: 'all' }

/** What the Redis recorder would leave in the minute hashes of one scope, as a map key → hash. */
function store(samples: LatencySample[], scope: StatsScope = ALL): Map<string, Record<string, number>> {
  const out = new Map<string, Record<string, number>>()
  for (const s of samples) {
    if (scope.kind === 'tenant' && s.tenant !== scope.tenant) continue
    const key = latencyKey('minute', bucketOf('minute', s.endedAtMs), scope)
    const h = out.get(key) ?? {}
    const inc = (f: string) => (h[f] = (h[f] ?? 0) + 1)
    inc(fieldName(s.edge, s.nodeRegion, { kind: 'outcome', outcome: s.outcome }))
    if (s.ttfbMs !== undefined) inc(fieldName(s.edge, s.nodeRegion, { kind: 'ttfb', bucket: bucketIndex(s.ttfbMs) }))
    inc(fieldName(s.edge, s.nodeRegion, { kind: 'total', bucket: bucketIndex(s.totalMs) }))
    out.set(key, h)
  }
  return out
}

function hashesFor(samples: LatencySample[], window: string, scope: StatsScope = ALL) {
  const query = LatencyStatsQuery.parse({ window })
  const range = statsRange(query.window.minutes, NOW)
  const stored = store(samples, scope)
  const hashes: LatencyHash[] = []
  for (let b = range.first; b <= range.last; b++) hashes.push(stored.get(latencyKey(range.resolution, b, scope)) ?? null)
  return { query, range, hashes }
}

function sample(over: Partial<LatencySample>): LatencySample {
  return { requestId: 'r', endedAtMs: NOW, edge: 'local', nodeRegion: 'us-east', model: 'tiny', tenant: 'a', status: 200, outcome: 'ok', ttfbMs: 10, totalMs: 100, failovers: 0, ...over }
}

describe('field names', () => {
  it('round-trip names holding the separators', () => {
    const f = fieldName('e|dge:1', 'eu|west', { kind: 'ttfb', bucket: 17 })
    expect(f.split('|')).toHaveLength(3)
    expect(parseField(f)).toEqual({ edge: 'e|dge:1', region: 'eu|west', metric: { kind: 'ttfb', bucket: 17 } })
    expect(parseField(fieldName('local', undefined, { kind: 'outcome', outcome: 'auth_failed' }))).toEqual({ edge: 'local', region: undefined, metric: { kind: 'outcome', outcome: 'auth_failed' } })
    for (const bad of ['x', 'a|b|o:unknown_outcome', 'a|b|t:9999', 'a|b|q:1', 'a|b|t:1.5']) expect(parseField(bad)).toBeUndefined()
  })

  it('keys tenants apart from the all-tenant hash', () => {
    expect(latencyKey('minute', 7, ALL)).toBe('zl:lat:m:7:all')
    expect(latencyKey('hour', 7, { kind: 'tenant', tenant: 'a:b' })).toBe('zl:lat:h:7:t:a%3Ab')
  })
})

describe('the stats query', () => {
  it('accepts 1m to 24h and defaults to 15m', () => {
    expect(LatencyStatsQuery.parse({}).window).toEqual({ text: '15m', minutes: 15 })
    expect(LatencyStatsQuery.parse({ window: '1m' }).window.minutes).toBe(1)
    expect(LatencyStatsQuery.parse({ window: '24h' }).window.minutes).toBe(1440)
    for (const window of ['0m', '25h', '1441m', '15', 'm', '1d', '-5m', '15m;drop']) expect(LatencyStatsQuery.safeParse({ window }).success, window).toBe(false)
  })

  it('reads minute hashes up to 2 h and hour hashes beyond', () => {
    expect(statsRange(15, NOW)).toMatchObject({ resolution: 'minute', last: bucketOf('minute', NOW), first: bucketOf('minute', NOW) - 14 })
    expect(statsRange(120, NOW).resolution).toBe('minute')
    expect(statsRange(121, NOW)).toMatchObject({ resolution: 'hour', first: bucketOf('hour', NOW) - 2 })
    expect(statsRange(24 * 60, NOW).last - statsRange(24 * 60, NOW).first).toBe(23)
  })
})

describe('computeLatencyStats', () => {
  it('counts per pair, per region and overall, with rates over the covered span', () => {
    const samples = [
      ...Array.from({ length: 6 }, (_, i) => sample({ nodeRegion: 'us-east', ttfbMs: 5 + i, totalMs: 50 + i })),
      ...Array.from({ length: 3 }, () => sample({ nodeRegion: 'eu-west', edge: 'DUB', ttfbMs: 80, totalMs: 300, endedAtMs: NOW - 5 * 60_000 })),
      sample({ nodeRegion: 'eu-west', outcome: 'upstream_error', status: 200 }),
      sample({ nodeRegion: undefined, outcome: 'auth_failed', status: 401, tenant: undefined, ttfbMs: 1, totalMs: 1 }),
    ]
    const { query, range, hashes } = hashesFor(samples, '15m')
    const stats = computeLatencyStats({ hashes, range, query, scope: ALL })
    expect(stats.spanSeconds).toBe(14 * 60 + 30)
    expect(stats.totals).toMatchObject({ requests: 11, errors: 1 })
    expect(stats.totals.requestsPerSec).toBeCloseTo(11 / (14 * 60 + 30), 4)
    expect(stats.regions.map((r) => [r.region, r.requests, r.errors])).toEqual([['eu-west', 4, 1], ['us-east', 6, 0], [null, 1, 0]])
    expect(stats.regions[0]!.errorRate).toBe(0.25)
    expect(stats.regions[0]!.outcomes).toEqual({ ok: 3, upstream_error: 1 })
    expect(stats.pairs.map((p) => [p.edge, p.region, p.requests])).toEqual([['DUB', 'eu-west', 3], ['local', 'eu-west', 1], ['local', 'us-east', 6], ['local', null, 1]])
    const usEast = stats.regions.find((r) => r.region === 'us-east')!
    for (const [metric, exact] of [['ttfbMs', 7], ['totalMs', 52]] as const) { // nearest rank: the 3rd of 6
      const p50 = usEast[metric].p50!
      expect(Math.abs(p50 - exact) / exact).toBeLessThan(0.1)
    }
    // The time series: one point per minute, named regions only.
    expect(stats.series.timestamps).toHaveLength(15)
    expect(stats.series.timestamps[14]).toBe(bucketOf('minute', NOW) * 60)
    expect(stats.series.regions.map((r) => r.region)).toEqual(['eu-west', 'us-east'])
    const eu = stats.series.regions[0]!
    expect(eu.requests[9]).toBe(3) // five minutes ago
    expect(eu.requests[14]).toBe(1)
    expect(eu.totalMs.p99[9]).toBeGreaterThanOrEqual(bucketBounds(bucketIndex(300)).lowerMs)
    expect(eu.ttfbMs.p50[0]).toBeNull()
  })

  it('applies region and edge filters', () => {
    const samples = [sample({ nodeRegion: 'us-east' }), sample({ nodeRegion: 'eu-west', edge: 'DUB' }), sample({ nodeRegion: 'eu-west' })]
    const { range, hashes } = hashesFor(samples, '5m')
    const byRegion = computeLatencyStats({ hashes, range, query: LatencyStatsQuery.parse({ window: '5m', region: 'eu-west' }), scope: ALL })
    expect(byRegion.totals.requests).toBe(2)
    expect(byRegion.filters).toEqual({ region: 'eu-west', edge: null })
    const byEdge = computeLatencyStats({ hashes, range, query: LatencyStatsQuery.parse({ window: '5m', edge: 'DUB' }), scope: ALL })
    expect(byEdge.pairs.map((p) => [p.edge, p.region])).toEqual([['DUB', 'eu-west']])
  })

  it('answers an empty window with zero counts and null percentiles', () => {
    const { query, range, hashes } = hashesFor([], '1m')
    const stats = computeLatencyStats({ hashes, range, query, scope: { kind: 'tenant', tenant: 'a' } })
    expect(stats).toMatchObject({ scope: 'tenant', tenant: 'a', regions: [], pairs: [], totals: { requests: 0, errorRate: 0, ttfbMs: { p50: null, p95: null, p99: null } } })
    expect(stats.series).toEqual({ intervalSeconds: 60, timestamps: [bucketOf('minute', NOW) * 60], regions: [] })
  })

  it('skips fields it does not know and counts that are not positive numbers', () => {
    const { query, range } = hashesFor([], '1m')
    const hash = { [fieldName('local', 'us-east', { kind: 'outcome', outcome: 'ok' })]: '2', 'local|us-east|future:1': 5, [fieldName('local', 'us-east', { kind: 'total', bucket: 3 })]: 'x' }
    const stats = computeLatencyStats({ hashes: [hash], range, query, scope: ALL })
    expect(stats.totals).toMatchObject({ requests: 2, totalMs: { p50: null } })
  })
})
