/** The read-only routes: /healthz (no auth), /v1/models and /v1/regions (a key, or ADMIN_TOKEN). */
import type { Context } from 'hono'
import type { AppEnv } from '../context.ts'
import type { EdgeDeps } from '../deps.ts'
import { knownModels } from '../middleware/validate.ts'
import { resumeCounter } from '../proxy/resume-counter.ts'
import { FRESH_MS } from '../routing/pick-node.ts'

/** `keys`: the isolate's key cache, whose answers for a failing store are counted (keys/key-cache.ts). */
export function healthz(deps: EdgeDeps, keys: { staleAnswers: number }) {
  return (c: Context<AppEnv>) =>
    c.json({ status: 'ok', region: deps.config.edgeRegion, rateLimitStoreFailures: deps.limiter.failureCount(), keyLookupsServedStale: keys.staleAnswers })
}

/** OpenAI's list shape: the union of models served by fresh, non-draining nodes. */
export function listModels(deps: EdgeDeps, now: () => number) {
  return async (c: Context<AppEnv>) => {
    const table = await deps.registry.table(c.get('waitUntil'))
    const data = knownModels(table.nodes, now()).map((id) => ({ id, object: 'model', created: 0, owned_by: 'zerolayer' }))
    return c.json({ object: 'list', data })
  }
}

/** The node table as this isolate sees it; node URLs only for ADMIN_TOKEN. */
export function listRegions(deps: EdgeDeps, now: () => number) {
  return async (c: Context<AppEnv>) => {
    const table = await deps.registry.table(c.get('waitUntil'))
    const t = now()
    const admin = c.get('principal').admin
    const nodes = table.nodes.map((n) => ({
      id: n.id,
      region: n.region,
      ...(admin ? { url: n.url } : {}),
      lat: n.lat,
      lon: n.lon,
      models: n.models ?? null,
      source: n.source,
      fresh: n.ts === undefined || t - n.ts < FRESH_MS,
      ageMs: n.ts === undefined ? null : t - n.ts,
      draining: n.draining,
      down: n.downUntilMs !== undefined && n.downUntilMs > t,
      running: n.running,
      waiting: n.waiting,
      maxBatch: n.maxBatch,
      kvUsedFrac: n.kvUsedFrac,
      tokPerSec: n.tokPerSec,
      // Published by nodes with a prefix cache; null where a node publishes none.
      prefillTokPerSec: n.prefillTokPerSec ?? null,
      prefixHitRate: n.prefixHitRate ?? null,
    }))
    return c.json({
      edge: deps.config.edgeRegion,
      source: table.source,
      ...(table.fallbackReason ? { fallbackReason: table.fallbackReason } : {}),
      fetchedAt: new Date(table.fetchedAtMs).toISOString(),
      nodes,
      // Streams continued on another node after theirs failed, by outcome, since this isolate started.
      resumes: resumeCounter.snapshot(),
    })
  }
}
