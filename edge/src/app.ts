/**
 * The edge app (DESIGN.md §3), one factory for both entries. The request path of a generate
 * call reads top to bottom: id + trace → JSON content type (415, before auth: content-type.ts)
 * → auth → requests/min asked → body + validation (meanwhile) → requests/min awaited → model
 * → affinity key → tokens/min (carrying the affinity read) → forward to the node chosen for
 * it; after its response ends, one log line and one latency sample (observe-request.ts). The
 * generate checks and handler run as one Hono handler (middleware/pipeline.ts), inside one middleware
 * for what every request does before and after (middleware/around.ts).
 */
import { Hono } from 'hono'
import { DIALECTS, type DialectTable } from '../../shared/src/dialects/index.ts'
import { webDigest } from '../../shared/src/digest.ts'
import type { AppEnv } from './context.ts'
import type { EdgeDeps } from './deps.ts'
import { dashboardFile, dashboardPage } from './dashboard/dashboard-route.ts'
import { latencyStats } from './dashboard/stats-route.ts'
import { KeyCache } from './keys/key-cache.ts'
import { consoleLog, observeRequests } from './latency/observe-request.ts'
import { deriveAffinity } from './middleware/affinity.ts'
import { around } from './middleware/around.ts'
import { authenticate, authenticateKey } from './middleware/auth.ts'
import { backgroundWork } from './middleware/background.ts'
import { requireJsonBody } from './middleware/content-type.ts'
import { notFound, onError } from './middleware/errors.ts'
import { pipeline } from './middleware/pipeline.ts'
import { limitTokens, openLimits, rateLimitHeaders } from './middleware/rate-limit.ts'
import { admitRequests, startRequestsCheck } from './middleware/requests-limit.ts'
import { requestId } from './middleware/request-id.ts'
import { checkModel, parseGenerate } from './middleware/validate.ts'
import { generate } from './routes/generate.ts'
import { healthz, listModels, listRegions } from './routes/info.ts'
import { storedResponseRoutes } from './routes/stored-responses.ts'
import { createAffinityMemory } from './routing/affinity-memory.ts'
import { edgeColo } from './routing/client-location.ts'
import { RecentDispatches } from './routing/recent-dispatches.ts'


/** `dialects`: the generate routes and error shapes; tests add a dialect of their own to the real ones. */
export function createApp(deps: EdgeDeps, dialects: DialectTable = DIALECTS): Hono<AppEnv> {
  const now = deps.now ?? Date.now
  const digest = deps.digest ?? webDigest
  const { config, limiter, registry } = deps
  const keys = new KeyCache(deps.keys, now)
  const codecs = dialects.codecs
  // Per isolate: where conversations were served (Redis-backed from the entries), and the requests
  // sent to each node that its heartbeat has not counted yet.
  const affinity = deps.affinity ?? { memory: createAffinityMemory({ ttlMs: config.affinity.ttlMs, now }) }
  const routing = { memory: affinity.memory, dispatches: new RecentDispatches(now) }
  const app = new Hono<AppEnv>()

  app.onError(onError(dialects))
  app.notFound(notFound(dialects))
  // Before and after everything else, as one middleware (around.ts), in this order.
  app.use(around(
    requestId(now),
    backgroundWork(deps.waitUntil),
    // The limits' headers on an answer the edge makes itself (a 429, an error) on a limited
    // route; a forwarded answer carries them already (generate.ts). None before a limit was asked.
    rateLimitHeaders(now),
    observeRequests({
      recorder: deps.latency,
      recordedPaths: new Set(codecs.map((codec) => codec.path)),
      edgeOf: (req) => edgeColo(req) ?? config.edgeRegion,
      log: deps.log ?? (config.requestLog ? consoleLog : undefined),
      now,
    }),
  ))

  app.get('/healthz', healthz(deps, keys))
  app.get('/v1/models', authenticate(config, keys, { allowAdmin: true, digest }), listModels(deps, now))
  app.get('/v1/regions', authenticate(config, keys, { allowAdmin: true, digest }), listRegions(deps, now))
  app.get('/v1/stats/latency', authenticate(config, keys, { allowAdmin: true, digest }), latencyStats(deps.latencyReader, now))
  // Stored responses: a key's own tenant's only (no ADMIN_TOKEN: it names no tenant).
  const stored = storedResponseRoutes(deps.responses)
  const byKey = authenticate(config, keys, { digest })
  app.get('/v1/responses/:id', byKey, stored.retrieve)
  app.get('/v1/responses/:id/input_items', byKey, stored.inputItems)
  app.delete('/v1/responses/:id', byKey, stored.remove)
  app.get('/dashboard', dashboardPage(deps.dashboardAssets))
  app.get('/dashboard/:file', dashboardFile(deps.dashboardAssets))

  for (const codec of codecs) {
    app.post(
      codec.path,
      // The checks in order, then the handler, as one (pipeline.ts); each check refuses by throwing.
      pipeline([
        openLimits(codec),
        requireJsonBody(),
        authenticateKey(config, keys, { digest }),
        // requests/min is asked here and awaited after the body is parsed (requests-limit.ts):
        // a bad body is answered without waiting on the limiter's store.
        startRequestsCheck(limiter),
        parseGenerate(codec, config.maxBodyBytes, limiter, now),
        admitRequests(limiter, now),
        checkModel(registry, now),
        deriveAffinity(config.affinity),
        limitTokens(limiter, now, affinity.readAlong),
      ], generate(deps, now, routing)),
    )
  }
  return app
}
