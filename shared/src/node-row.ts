/**
 * The node registry's wire contract (DESIGN.md §5): each GPU node writes one JSON row per second
 * into the Redis hash `zl:nodes` under its id; edges read and parse them. One schema for both.
 */
import { z } from 'zod'

export const NODES_KEY = 'zl:nodes'

/** A heartbeat older than this (ms) is stale: the node is not routed to. */
export const NODE_FRESH_MS = 5000

const load = z.coerce.number().catch(0)

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
  /** Prompt tokens per second of prefill, smoothed: what a cached prefix saves, in time (edge affinity). */
  prefillTokPerSec: load,
  /** Prefix-cache hits ÷ lookups over the last minute, 0..1; absent when the node's cache is off. */
  prefixHitRate: z.coerce.number().min(0).max(1).optional().catch(undefined),
  draining: z.boolean().catch(false),
  /** Epoch ms of the beat. */
  ts: z.coerce.number(),
})
export type NodeRow = z.infer<typeof NodeRow>
