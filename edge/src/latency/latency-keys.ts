/**
 * The Redis key scheme of the latency histograms (DESIGN.md §8). Every request increments a few
 * fields in FOUR hashes, in one pipeline:
 *
 *   zl:lat:m:<epoch minute>:all          every tenant, per minute   EXPIRE 2 h
 *   zl:lat:m:<epoch minute>:t:<tenant>   one tenant, per minute     EXPIRE 2 h
 *   zl:lat:h:<epoch hour>:all            every tenant, per hour     EXPIRE 26 h
 *   zl:lat:h:<epoch hour>:t:<tenant>     one tenant, per hour       EXPIRE 26 h
 *
 * Fields are `<edge>|<node region>|<metric>`, metric one of `o:<outcome>` (requests that ended
 * so), `t:<bucket>` (TTFB histogram) and `d:<bucket>` (total duration histogram); buckets are
 * histogram.ts indexes, `-` stands for "no node region". Names are URI-encoded, so `|` and `:`
 * only ever separate. A query reads ONE hash per minute (or hour) for its scope: an admin reads
 * the `all` hashes, a tenant its own, and neither depends on how many tenants or edges exist.
 * Requests without a tenant (bad key) are counted in `all` only.
 */
import { BUCKET_COUNT } from './histogram.ts'
import { isRequestOutcome, type RequestOutcome } from './outcome.ts'

export const LATENCY_KEY_PREFIX = 'zl:lat'

export type Resolution = 'minute' | 'hour'

export const RESOLUTIONS: Record<Resolution, { code: 'm' | 'h'; seconds: number; ttlSeconds: number }> = {
  minute: { code: 'm', seconds: 60, ttlSeconds: 2 * 3600 },
  // Windows longer than the minute hashes live are answered from these.
  hour: { code: 'h', seconds: 3600, ttlSeconds: 26 * 3600 },
}

/** Whose requests a query sees. */
export type StatsScope = { kind: 'all' } | { kind: 'tenant'; tenant: string }

/** Stands for an absent node region in field names (a region is never `-`). */
const NO_REGION = '-'

export type Metric = { kind: 'outcome'; outcome: RequestOutcome } | { kind: 'ttfb' | 'total'; bucket: number }

export interface ParsedField {
  edge: string
  /** undefined: no node answered. */
  region: string | undefined
  metric: Metric
}

/** Index of the minute (or hour) holding epoch ms `atMs`. */
export function bucketOf(resolution: Resolution, atMs: number): number {
  return Math.floor(atMs / 1000 / RESOLUTIONS[resolution].seconds)
}

export function latencyKey(resolution: Resolution, bucket: number, scope: StatsScope): string {
  const base = `${LATENCY_KEY_PREFIX}:${RESOLUTIONS[resolution].code}:${bucket}`
  return scope.kind === 'all' ? `${base}:all` : `${base}:t:${encodeURIComponent(scope.tenant)}`
}

export function fieldName(edge: string, region: string | undefined, metric: Metric): string {
  const m = metric.kind === 'outcome' ? `o:${metric.outcome}` : `${metric.kind === 'ttfb' ? 't' : 'd'}:${metric.bucket}`
  return `${encodeURIComponent(edge)}|${region === undefined ? NO_REGION : encodeURIComponent(region)}|${m}`
}

/** undefined for a field this version does not know (skipped, so old and new edges can mix). */
export function parseField(field: string): ParsedField | undefined {
  const parts = field.split('|')
  if (parts.length !== 3) return undefined
  const [edgePart, regionPart, m] = parts as [string, string, string]
  const metric = parseMetric(m)
  if (!metric) return undefined
  try {
    return { edge: decodeURIComponent(edgePart), region: regionPart === NO_REGION ? undefined : decodeURIComponent(regionPart), metric }
  } catch {
    return undefined
  }
}

function parseMetric(m: string): Metric | undefined {
  const colon = m.indexOf(':')
  const kind = m.slice(0, colon)
  const rest = m.slice(colon + 1)
  if (kind === 'o') return isRequestOutcome(rest) ? { kind: 'outcome', outcome: rest } : undefined
  if (kind !== 't' && kind !== 'd') return undefined
  const bucket = Number(rest)
  if (!Number.isInteger(bucket) || bucket < 0 || bucket >= BUCKET_COUNT) return undefined
  return { kind: kind === 't' ? 'ttfb' : 'total', bucket }
}
