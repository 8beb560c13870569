/**
 * The edge section's fair measurements, run by edge.ts after its unpinned phases,
 * against the same limiter (redis-server + the Upstash bridge) and the same instant upstream:
 * - pinned latency (edge-pinned.ts): edge, bare Hono passthrough and nginx, each alone on core 0;
 * - instructions per request (edge-instructions.ts): edge and bare passthrough under callgrind;
 * - the edge's full body check in instructions at 1 kB and 100 kB (lazy validation's evidence),
 *   and its upstream client's per request (piece-costs.ts);
 * - where the edge's CPU goes by stage (edge-profile.ts), for docs/PERFORMANCE.md.
 */
import type { BenchContext } from '../lib/report-types.ts'
import { runEdgeInstructions } from './edge-instructions.ts'
import { runPinnedEdge, type PinnedEdgeInput, type PinnedEdgeResult } from './edge-pinned.ts'
import { profileEdgeStages } from './edge-profile.ts'
import { measureUpstreamCost, measureValidationCost } from './piece-costs.ts'

export async function runFairEdge(ctx: BenchContext, input: PinnedEdgeInput): Promise<PinnedEdgeResult> {
  const notes: string[] = []
  const pinned = await runPinnedEdge(ctx, input)
  notes.push(...pinned.notes)
  const profile = await profileEdgeStages(ctx, input)
  const instructions = await runEdgeInstructions(ctx, input)
  notes.push(...instructions.notes)
  const validation = await measureValidationCost(ctx)
  const upstream = await measureUpstreamCost(ctx, input.instantUrl)
  return {
    figures: { ...pinned.figures, ...instructions.figures },
    raw: { pinned: pinned.raw, instructions: { ...instructions.raw, ...(validation ? { body_check_per_call: validation } : {}), ...(upstream ? { upstream_client_per_request: upstream } : {}) }, profile },
    notes,
  }
}
