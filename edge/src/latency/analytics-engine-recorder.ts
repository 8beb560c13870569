/**
 * Latency samples as Workers Analytics Engine data points, when the `LATENCY` dataset is bound
 * (wrangler.toml). Query them with the SQL API, e.g. per region over the last hour:
 *
 *   SELECT blob2 AS region, quantileWeighted(0.95)(double2, _sample_interval) AS p95_total_ms,
 *          SUM(_sample_interval) AS requests
 *   FROM zerolayer_edge_latency WHERE timestamp > NOW() - INTERVAL '1' HOUR GROUP BY region
 *
 * Columns: blob1 edge, blob2 node region ('' if none), blob3 model ('' if unknown), blob4 tenant
 * ('' if none), blob5 outcome, blob6 affinity (hit | spread | moved | none; '' if no node answered); double1 TTFB ms (-1 if none), double2 total ms, double3 status,
 * double4 failovers; index1 tenant (the sampling key, so one tenant's burst never thins another's).
 * `writeDataPoint` is fire-and-forget: it neither waits nor throws for a full buffer.
 */
import type { LatencyRecorder } from './latency-recorder.ts'

/** The binding's one method (Workers' AnalyticsEngineDataset). */
export interface AnalyticsEngineDataset {
  writeDataPoint(point: { blobs?: string[]; doubles?: number[]; indexes?: string[] }): void
}

/** Analytics Engine's limit on the index, bytes; tenants are far shorter, but never fail a write on it. */
const MAX_INDEX_BYTES = 96

export function createAnalyticsEngineRecorder(dataset: AnalyticsEngineDataset): LatencyRecorder {
  return {
    async record(s) {
      dataset.writeDataPoint({
        blobs: [s.edge, s.nodeRegion ?? '', s.model ?? '', s.tenant ?? '', s.outcome, s.affinity ?? ''],
        doubles: [s.ttfbMs ?? -1, s.totalMs, s.status, s.failovers],
        indexes: [truncateUtf8(s.tenant ?? '', MAX_INDEX_BYTES)],
      })
    },
  }
}

function truncateUtf8(s: string, maxBytes: number): string {
  const bytes = new TextEncoder().encode(s)
  if (bytes.byteLength <= maxBytes) return s
  return new TextDecoder().decode(bytes.slice(0, maxBytes)).replace(/\uFFFD+$/, '')
}
