/**
 * Stored histogram hashes → the `/v1/stats/latency` answer (shape documented in edge/README.md).
 * Pure: counts from every minute (or hour) of the window are merged per (edge → node region)
 * pair, per node region and overall, and percentiles come from the merged buckets
 * (latency/histogram.ts: within 10% of the exact value). The time series keeps one point per
 * minute (hour) per node region for the dashboard's charts.
 */
import { emptyHistogram, mergeInto, percentile, type Histogram } from '../latency/histogram.ts'
import { bucketOf, parseField, RESOLUTIONS, type Resolution, type StatsScope } from '../latency/latency-keys.ts'
import { isError, type RequestOutcome } from '../latency/outcome.ts'
import type { LatencyHash } from '../latency/redis-latency-store.ts'
import type { LatencyStatsQuery } from './stats-query.ts'

/** Windows up to this long are read from the minute hashes (which live 2 h), longer ones from the hour hashes. */
export const MAX_MINUTE_WINDOW = 120
/** Relative error bound of every percentile (one bucket width). */
export const PERCENTILE_RELATIVE_ERROR = 0.1

export interface Percentiles {
  p50: number | null
  p95: number | null
  p99: number | null
}

export interface LatencyRow {
  requests: number
  /** Requests the service failed (latency/outcome.ts ERROR_OUTCOMES). */
  errors: number
  requestsPerSec: number
  /** errors / requests; 0 without requests. */
  errorRate: number
  outcomes: Partial<Record<RequestOutcome, number>>
  /** Edge receipt → first response byte. */
  ttfbMs: Percentiles
  /** Edge receipt → end of the response body. */
  totalMs: Percentiles
}

export interface SeriesPercentiles {
  p50: Array<number | null>
  p95: Array<number | null>
  p99: Array<number | null>
}

export interface RegionSeries {
  region: string
  requests: number[]
  errors: number[]
  ttfbMs: SeriesPercentiles
  totalMs: SeriesPercentiles
}

export interface LatencyStats {
  window: string
  scope: 'all' | 'tenant'
  /** The key's tenant (tenant scope only). */
  tenant?: string
  resolution: Resolution
  /** Start of the oldest minute (hour) in the window, and now. */
  from: string
  to: string
  spanSeconds: number
  percentileRelativeError: number
  filters: { region: string | null; edge: string | null }
  totals: LatencyRow
  /** Per node region; `region: null` holds requests no node answered (refused at the edge, none reachable). */
  regions: Array<LatencyRow & { region: string | null }>
  pairs: Array<LatencyRow & { edge: string; region: string | null }>
  series: {
    intervalSeconds: number
    /** Epoch seconds: the start of each minute (hour), oldest first. */
    timestamps: number[]
    /** Node regions only (requests no node answered have no latency to chart). */
    regions: RegionSeries[]
  }
}

/** Which minutes (hours) a window covers: the current, partial one and those before it. */
export interface StatsRange {
  resolution: Resolution
  first: number
  last: number
  fromMs: number
  toMs: number
}

export function statsRange(windowMinutes: number, nowMs: number): StatsRange {
  const resolution: Resolution = windowMinutes <= MAX_MINUTE_WINDOW ? 'minute' : 'hour'
  const count = resolution === 'minute' ? windowMinutes : Math.ceil(windowMinutes / 60)
  const last = bucketOf(resolution, nowMs)
  const first = last - count + 1
  return { resolution, first, last, fromMs: first * RESOLUTIONS[resolution].seconds * 1000, toMs: nowMs }
}

/** Counts of one group of requests. */
class Tally {
  readonly outcomes = new Map<RequestOutcome, number>()
  readonly ttfb: Histogram = emptyHistogram()
  readonly total: Histogram = emptyHistogram()

  merge(other: Tally): this {
    for (const [o, n] of other.outcomes) this.outcomes.set(o, (this.outcomes.get(o) ?? 0) + n)
    mergeInto(this.ttfb, other.ttfb)
    mergeInto(this.total, other.total)
    return this
  }

  requests(): number {
    let n = 0
    for (const c of this.outcomes.values()) n += c
    return n
  }

  errors(): number {
    let n = 0
    for (const [o, c] of this.outcomes) if (isError(o)) n += c
    return n
  }
}

/** pair key → tally, for one stored hash. */
type BucketTallies = Map<string, { edge: string; region: string | undefined; tally: Tally }>

export function computeLatencyStats(input: {
  hashes: readonly LatencyHash[]
  range: StatsRange
  query: LatencyStatsQuery
  scope: StatsScope
}): LatencyStats {
  const { range, query, scope } = input
  const buckets = input.hashes.map((h) => talliesOf(h, query))
  const spanSeconds = Math.max(1, (range.toMs - range.fromMs) / 1000)

  const pairs = new Map<string, { edge: string; region: string | undefined; tally: Tally }>()
  for (const bucket of buckets) {
    for (const [k, v] of bucket) {
      const pair = pairs.get(k) ?? { edge: v.edge, region: v.region, tally: new Tally() }
      pair.tally.merge(v.tally)
      pairs.set(k, pair)
    }
  }
  const regions = new Map<string | undefined, Tally>()
  const totals = new Tally()
  for (const p of pairs.values()) {
    regions.set(p.region, (regions.get(p.region) ?? new Tally()).merge(p.tally))
    totals.merge(p.tally)
  }

  return {
    window: query.window.text,
    scope: scope.kind,
    ...(scope.kind === 'tenant' ? { tenant: scope.tenant } : {}),
    resolution: range.resolution,
    from: new Date(range.fromMs).toISOString(),
    to: new Date(range.toMs).toISOString(),
    spanSeconds: round(spanSeconds, 3),
    percentileRelativeError: PERCENTILE_RELATIVE_ERROR,
    filters: { region: query.region ?? null, edge: query.edge ?? null },
    totals: toRow(totals, spanSeconds),
    regions: [...regions].sort(([a], [b]) => compareRegions(a, b)).map(([region, t]) => ({ region: region ?? null, ...toRow(t, spanSeconds) })),
    pairs: [...pairs.values()]
      .sort((a, b) => a.edge.localeCompare(b.edge) || compareRegions(a.region, b.region))
      .map((p) => ({ edge: p.edge, region: p.region ?? null, ...toRow(p.tally, spanSeconds) })),
    series: toSeries(buckets, range, [...regions.keys()].filter((r): r is string => r !== undefined).sort()),
  }
}

/** One stored hash → tallies per pair, with the query's filters applied. */
function talliesOf(hash: LatencyHash, query: LatencyStatsQuery): BucketTallies {
  const out: BucketTallies = new Map()
  if (!hash) return out
  for (const [field, raw] of Object.entries(hash)) {
    const f = parseField(field)
    const count = Number(raw)
    if (!f || !Number.isFinite(count) || count <= 0) continue
    if (query.region !== undefined && f.region !== query.region) continue
    if (query.edge !== undefined && f.edge !== query.edge) continue
    const key = `${f.edge}\u0000${f.region ?? ''}`
    let entry = out.get(key)
    if (!entry) out.set(key, (entry = { edge: f.edge, region: f.region, tally: new Tally() }))
    const m = f.metric
    if (m.kind === 'outcome') entry.tally.outcomes.set(m.outcome, (entry.tally.outcomes.get(m.outcome) ?? 0) + count)
    else (m.kind === 'ttfb' ? entry.tally.ttfb : entry.tally.total)[m.bucket]! += count
  }
  return out
}

function toRow(t: Tally, spanSeconds: number): LatencyRow {
  const requests = t.requests()
  const errors = t.errors()
  return {
    requests,
    errors,
    requestsPerSec: round(requests / spanSeconds, 4),
    errorRate: requests === 0 ? 0 : round(errors / requests, 4),
    outcomes: Object.fromEntries([...t.outcomes].sort(([a], [b]) => a.localeCompare(b))),
    ttfbMs: percentiles(t.ttfb),
    totalMs: percentiles(t.total),
  }
}

function toSeries(buckets: BucketTallies[], range: StatsRange, regions: string[]): LatencyStats['series'] {
  const intervalSeconds = RESOLUTIONS[range.resolution].seconds
  const timestamps = buckets.map((_, i) => (range.first + i) * intervalSeconds)
  const series = regions.map((region) => {
    const perBucket = buckets.map((b) => {
      const t = new Tally()
      for (const v of b.values()) if (v.region === region) t.merge(v.tally)
      return { requests: t.requests(), errors: t.errors(), ttfb: percentiles(t.ttfb), total: percentiles(t.total) }
    })
    const column = (pick: (p: (typeof perBucket)[number]) => Percentiles): SeriesPercentiles => ({
      p50: perBucket.map((p) => pick(p).p50),
      p95: perBucket.map((p) => pick(p).p95),
      p99: perBucket.map((p) => pick(p).p99),
    })
    return {
      region,
      requests: perBucket.map((p) => p.requests),
      errors: perBucket.map((p) => p.errors),
      ttfbMs: column((p) => p.ttfb),
      totalMs: column((p) => p.total),
    }
  })
  return { intervalSeconds, timestamps, regions: series }
}

function percentiles(h: Histogram): Percentiles {
  const at = (q: number) => {
    const v = percentile(h, q)
    return v === undefined ? null : round(v, 1)
  }
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) }
}

/** Named regions in order, "no node" last. */
function compareRegions(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0
  if (a === undefined) return 1
  if (b === undefined) return -1
  return a.localeCompare(b)
}

function round(x: number, digits: number): number {
  const f = 10 ** digits
  return Math.round(x * f) / f
}
