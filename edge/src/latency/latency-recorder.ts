/**
 * One record per forwarded request, written after the response ends (DESIGN.md §8). The
 * recorder behind this interface (Redis per-minute histograms, Analytics Engine) is optional:
 * the app runs without one.
 */

export interface LatencySample {
  requestId: string
  /** This edge's location (colo or EDGE_REGION). */
  edge: string
  /** Region of the node that answered; undefined when none did. */
  nodeRegion?: string
  model: string
  tenant: string
  status: number
  /** Edge receipt → first body byte sent to the client, ms; undefined if none was sent. */
  ttfbMs?: number
  /** Edge receipt → body end (or failure, or client gone), ms. */
  totalMs: number
  /** Upstream attempts that failed before the one that answered. */
  failovers: number
  /** The body ended because the upstream broke (an error event was sent) or the client left. */
  outcome: 'complete' | 'upstream_error' | 'client_gone'
}

export interface LatencyRecorder {
  record(sample: LatencySample): Promise<void>
}
