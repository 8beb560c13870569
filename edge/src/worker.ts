/**
 * The Workers entry (wrangler.toml `main`): bindings → EdgeDeps → the one app. Built once per
 * isolate (per bindings object), so the key cache, node table, marked-down nodes and limiter
 * instances live as long as the isolate. Compatibility flag `enable_request_signal` makes
 * `request.signal` fire when the client hangs up (forward.ts aborts the upstream on it).
 */
import { Redis } from '@upstash/redis/cloudflare'
import type { ExecutionContext, ExportedHandler, Response as WorkersResponse } from '@cloudflare/workers-types/index.ts'
import { createApp, type EdgeDeps } from './app.ts'
import { parseEdgeConfig, type EdgeConfig } from './config.ts'
import { BUNDLED_DASHBOARD_ASSETS } from './dashboard/bundled-assets.ts'
import { createRedisKeyStore } from './keys/key-store.ts'
import { createAnalyticsEngineRecorder, type AnalyticsEngineDataset } from './latency/analytics-engine-recorder.ts'
import { combineRecorders } from './latency/latency-recorder.ts'
import { createRedisLatencyReader, createRedisLatencyRecorder, LATENCY_READ_TIMEOUT_MS, LATENCY_WRITE_TIMEOUT_MS } from './latency/redis-latency-store.ts'
import { withFailurePolicy } from './limits/rate-limiter.ts'
import { createUpstashLimitStore } from './limits/upstash-limit-store.ts'
import { createNodeRegistry, REGISTRY_TIMEOUT_MS } from './routing/node-registry.ts'

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
  DEV_MODE?: string
  /** "0" turns the per-request JSON log line off (default on). */
  REQUEST_LOG?: string
  /** Workers Analytics Engine dataset for latency samples ([[analytics_engine_datasets]]), optional. */
  LATENCY?: AnalyticsEngineDataset
}

/** Longest a key lookup may take before the request is answered 503 (a cached key needs none). */
const KEY_LOOKUP_TIMEOUT_MS = 1000

/** Workers bindings → dependencies; tests build apps with overridden bindings through this too. */
export function createWorkerDeps(env: Env, overrides: Partial<EdgeDeps> = {}): EdgeDeps {
  const config = parseEdgeConfig(env as unknown as Record<string, unknown>)
  return {
    config,
    keys: createRedisKeyStore(redisClient(config, KEY_LOOKUP_TIMEOUT_MS)),
    limiter: withFailurePolicy(createUpstashLimitStore(redisClient(config, config.rateLimitTimeoutMs)), {
      mode: config.rateLimitFailureMode,
      timeoutMs: config.rateLimitTimeoutMs,
    }),
    registry: createNodeRegistry({ redis: redisClient(config, REGISTRY_TIMEOUT_MS), fallback: config.gpuNodes }),
    upstream: (url, init) => fetch(url, init),
    latency: combineRecorders(
      createRedisLatencyRecorder(redisClient(config, LATENCY_WRITE_TIMEOUT_MS)),
      env.LATENCY ? createAnalyticsEngineRecorder(env.LATENCY) : undefined,
    ),
    latencyReader: createRedisLatencyReader(redisClient(config, LATENCY_READ_TIMEOUT_MS)),
    dashboardAssets: BUNDLED_DASHBOARD_ASSETS,
    ...overrides,
  }
}

/**
 * One REST client per use, each bounded by its own timeout. No retries (the failure policy
 * decides at once), no auto-pipelining (it would batch commands of concurrent requests into one
 * fetch, sharing I/O across request contexts, which Workers forbids), no telemetry headers.
 */
export function redisClient(config: EdgeConfig, timeoutMs: number): Redis {
  return new Redis({
    url: config.upstash.url,
    token: config.upstash.token,
    retry: false,
    enableAutoPipelining: false,
    enableTelemetry: false,
    signal: () => AbortSignal.timeout(timeoutMs),
  })
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

export default {
  fetch(request, env, ctx: ExecutionContext) {
    const built = appFor(env)
    if (!built.ok) {
      const body = { error: { message: 'The edge is misconfigured.', type: 'server_error', param: null, code: 'internal' } }
      return asWorkers(Response.json(body, { status: 500 }))
    }
    return asWorkers(built.app.fetch(request as unknown as Request, env, ctx))
  },
} satisfies ExportedHandler<Env>
