/**
 * The Workers entry (wrangler.toml `main`): bindings → EdgeDeps → the one app. Built once per
 * isolate (per bindings object), so the key cache, node table, marked-down nodes and limiter
 * instances live as long as the isolate. Compatibility flag `enable_request_signal` makes
 * `request.signal` fire when the client hangs up (forward.ts aborts the upstream on it).
 */
import { Redis } from '@upstash/redis/cloudflare'
import type { ExecutionContext, ExportedHandler, Response as WorkersResponse } from '@cloudflare/workers-types/index.ts'
import { createApp } from '../app.ts'
import { parseEdgeConfig } from '../config.ts'
import { BUNDLED_DASHBOARD_ASSETS } from '../dashboard/bundled-assets.ts'
import type { EdgeDeps } from '../deps.ts'
import { createAnalyticsEngineRecorder, type AnalyticsEngineDataset } from '../latency/analytics-engine-recorder.ts'
import { DEFAULT_BATCHING } from '../latency/batching-recorder.ts'
import { discardBody } from '../middleware/body-limit.ts'
import { withHeadersTimeout } from '../proxy/upstream-fetch.ts'
import { composeEdgeDeps, redisClientOptions } from './compose-edge.ts'

/** Bindings: [vars] in wrangler.toml, secrets via `wrangler secret put`, `.dev.vars` locally. */
export interface Env {
  UPSTASH_REDIS_REST_URL: string
  UPSTASH_REDIS_REST_TOKEN: string
  EDGE_SHARED_SECRET: string
  /** JSON array (string) or a [vars] array. */
  GPU_NODES?: string | unknown[]
  ADMIN_TOKEN?: string
  RATE_LIMIT_FAILURE_MODE?: string
  RATE_LIMIT_TIMEOUT_MS?: string
  MAX_BODY_BYTES?: string
  DEFAULT_RPM?: string
  DEFAULT_TPM?: string
  EDGE_REGION?: string
  EDGE_LAT?: string
  EDGE_LON?: string
  UPSTREAM_CONNECT_TIMEOUT_MS?: string
  REQUEST_TIMEOUT_MS?: string
  /** Cache-affine routing: `off` routes as before (default on); its balance factor and Redis TTL. */
  AFFINITY?: string
  AFFINITY_BALANCE_FACTOR?: string
  AFFINITY_TTL_MS?: string
  DEV_MODE?: string
  /** Latency samples per Redis batch (default 2000). */
  LATENCY_BATCH_MAX_SAMPLES?: string
  /** "0" turns the per-request JSON log line off (default on). */
  REQUEST_LOG?: string
  /** Workers Analytics Engine dataset for latency samples ([[analytics_engine_datasets]]), optional. */
  LATENCY?: AnalyticsEngineDataset
}

/** Workers bindings → dependencies; tests build apps with overridden bindings through this too. */
export function createWorkerDeps(env: Env, overrides: Partial<EdgeDeps> = {}): EdgeDeps {
  const config = parseEdgeConfig(env as unknown as Record<string, unknown>)
  return {
    // Latency samples are summed per isolate and written by the request that opened the batch
    // (batching-recorder.ts, ownerWrites): one pipeline per second instead of one per request.
    // No `coalesce`: that shares one request's Redis promise with others (single-flight.ts).
    ...composeEdgeDeps(config, {
      redis: (timeoutMs) => new Redis(redisClientOptions(config, timeoutMs)),
      upstream: withHeadersTimeout((url, init) => fetch(url, init)),
      latencyBatching: { ...DEFAULT_BATCHING, maxSamples: config.latencyBatchMaxSamples, ownerWrites: true },
      ...(env.LATENCY ? { alsoRecord: createAnalyticsEngineRecorder(env.LATENCY) } : {}),
      dashboardAssets: BUNDLED_DASHBOARD_ASSETS,
    }),
    ...overrides,
  }
}

type Built = { ok: true; app: ReturnType<typeof createApp> } | { ok: false; message: string }
const apps = new WeakMap<object, Built>()

function appFor(env: Env): Built {
  let built = apps.get(env)
  if (!built) {
    try {
      built = { ok: true, app: createApp(createWorkerDeps(env)) }
    } catch (e) {
      // Names the bad variables (never their values); logged once per isolate.
      const message = e instanceof Error ? e.message : 'invalid configuration'
      console.error(JSON.stringify({ level: 'error', msg: 'edge configuration rejected', detail: message }))
      built = { ok: false, message }
    }
    apps.set(env, built)
  }
  return built
}

/**
 * The app is typed against the web globals of the repo's Node-typed build; in workerd they are
 * the same objects as the Workers types describe, so the entry converts the static types only.
 */
const asWorkers = (res: Response | Promise<Response>) => res as unknown as WorkersResponse | Promise<WorkersResponse>

/**
 * An answer made without reading the request's body (a 401, a 415, a 429 before the body): its
 * body is read and dropped first, within body-limit.ts's bounds. workerd closes a connection whose
 * request body was left unread, and a client still sending it then sees a reset instead of the
 * answer; measured, reading it after answering (in waitUntil) still lost some answers, reading
 * it first none.
 */
async function answerAfterBody(answer: Response | Promise<Response>, request: Request): Promise<Response> {
  const res = await answer
  if (request.body && !request.bodyUsed && !request.body.locked) await discardBody(request.body.getReader(), 0)
  return res
}

export default {
  fetch(request, env, ctx: ExecutionContext) {
    const built = appFor(env)
    if (!built.ok) {
      const body = { error: { message: 'The edge is misconfigured.', type: 'server_error', param: null, code: 'internal' } }
      return asWorkers(Response.json(body, { status: 500 }))
    }
    return asWorkers(answerAfterBody(built.app.fetch(request as unknown as Request, env, ctx), request as unknown as Request))
  },
} satisfies ExportedHandler<Env>
