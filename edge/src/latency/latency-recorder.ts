/**
 * One record per generate request, handed over after the response ends (DESIGN.md §8): the
 * observe-request middleware builds it, recorders store it (Redis per-minute histograms,
 * Workers Analytics Engine). Optional: the app runs without a recorder.
 */
import type { AffinityReason } from '../context.ts'
import type { RequestOutcome } from './outcome.ts'

export interface LatencySample {
  requestId: string
  /** Epoch ms the response ended (or failed, or the client left): the minute it is counted in. */
  endedAtMs: number
  /** This edge's location (Cloudflare colo, else EDGE_REGION). */
  edge: string
  /** Region of the node that answered; undefined when no node did (refused at the edge, none reachable). */
  nodeRegion?: string
  /** The requested model; undefined when the request was refused before its body was read. */
  model?: string
  /** The key's tenant; undefined when no valid key was presented. */
  tenant?: string
  /** The status the client got (499 when it left before the node answered). */
  status: number
  outcome: RequestOutcome
  /** Edge receipt → first body byte from the node (or the edge's own answer), ms; undefined if none came. */
  ttfbMs?: number
  /** Edge receipt → body end (or failure, or client gone), ms. */
  totalMs: number
  /** Upstream attempts that failed before the one that answered. */
  failovers: number
  /** How cache-affine routing placed it (hit | spread | moved | none); undefined when no node answered. */
  affinity?: AffinityReason
}

export interface LatencyRecorder {
  /** Resolves when stored; rejects on failure (the caller logs, never retries). */
  record(sample: LatencySample): Promise<void>
  /** Stores what is buffered now (recorders that batch); resolves when done, never rejects. */
  flush?(): Promise<void>
}

/** Every recorder gets every sample; one failing does not stop the others. */
export function combineRecorders(...recorders: Array<LatencyRecorder | undefined>): LatencyRecorder | undefined {
  const all = recorders.filter((r): r is LatencyRecorder => r !== undefined)
  if (all.length <= 1) return all[0]
  return {
    async record(sample) {
      const results = await Promise.allSettled(all.map((r) => r.record(sample)))
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
      if (failed) throw failed.reason
    },
  }
}
