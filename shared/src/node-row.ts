/**
 * The node registry's wire contract (DESIGN.md §5): each GPU node writes one JSON row per second
 * into the Redis hash `zl:nodes` under its id; edges read and parse them. One schema for both.
 */
import { z } from 'zod'

export const NODES_KEY = 'zl:nodes'

/** A heartbeat older than this (ms) is stale: the node is not routed to. */
export const NODE_FRESH_MS = 5000

const load = z.coerce.number().catch(0)

/**
 * A figure a node may leave out (an older node, or one whose prefix cache is off): absent stays
 * absent, and a malformed one reads as absent rather than failing the row.
 */
const optionalFigure = (schema: z.ZodNumber) => z.preprocess((v) => (v === undefined || v === null ? undefined : Number(v)), schema.optional()).catch(undefined)

/** Lenient on load figures (a malformed figure reads as 0), strict on identity and place. */
export const NodeRow = z.object({
  id: z.string().min(1),
  url: z.url(),
  region: z.string().min(1),
  lat: z.coerce.number().min(-90).max(90),
  lon: z.coerce.number().min(-180).max(180),
  models: z.array(z.string()),
  maxBatch: load,
  running: load,
  waiting: load,
  /** KV bytes per step over the node's budget, 0..1. */
  kvUsedFrac: load,
  /** Generated tokens per second, recent. */
  tokPerSec: load,
  /**
   * Prompt tokens per second this node prefills, recent (optional): what the edge's cross-region
   * affinity rule prices a cache miss with (edge/src/routing/affinity-route.ts).
   */
  prefillTokPerSec: optionalFigure(z.number().positive().finite()),
  /** Share of recent prompt tokens served from the node's prefix cache, 0..1 (optional; shown, not routed on). */
  prefixHitRate: optionalFigure(z.number().min(0).max(1)),
  draining: z.boolean().catch(false),
  /** Epoch ms of the beat. */
  ts: z.coerce.number(),
})
export type NodeRow = z.infer<typeof NodeRow>
