/**
 * What the app is built from (its dependencies) and what its middlewares hand each other
 * (Hono context variables). Each variable is set by exactly one middleware, named beside it.
 */
import type { Context } from 'hono'
import type { DialectCodec } from '../../shared/src/dialects/index.ts'
import type { Digest } from '../../shared/src/digest.ts'
import type { GenerateRequest } from '../../shared/src/generation.ts'
import type { EdgeConfig } from './config.ts'
import type { KeyStore, Principal } from './keys/key-store.ts'
import type { LatencyRecorder } from './latency/latency-recorder.ts'
import type { LatencyReader } from './latency/redis-latency-store.ts'
import type { DashboardAssets } from './dashboard/dashboard-assets.ts'
import type { LimitDecision, RateLimiter } from './limits/rate-limiter.ts'
import type { ClientSignal, UpstreamFetch } from './proxy/forward.ts'
import type { BodyOutcome } from './proxy/pass-through.ts'
import type { ReadAlong } from './redis/read-along.ts'
import type { AffinityKey } from './routing/affinity-key.ts'
import type { AffinityMemory } from './routing/affinity-memory.ts'
import type { AffinityReason } from './routing/affinity-route.ts'
import type { NodeRegistry } from './routing/node-registry.ts'

export interface EdgeDeps {
  config: EdgeConfig
  keys: KeyStore
  limiter: RateLimiter
  registry: NodeRegistry
  /** fetch on Workers; undici with one HTTP/2 connection per node on the Node entry. */
  upstream: UpstreamFetch
  /** Gets one sample per generate request after its response ended (Redis, Analytics Engine). */
  latency?: LatencyRecorder
  /** Reads the latency histograms for /v1/stats/latency (404 without one). */
  latencyReader?: LatencyReader
  /** The /dashboard page and its assets (404 without them); each entry bundles its own. */
  dashboardAssets?: DashboardAssets
  /** The per-request JSON log line (default: console.log). */
  log?: LogLine
  /** Keeps background work alive after the response (Workers' ctx.waitUntil is used when present). */
  waitUntil?: (work: Promise<unknown>) => void
  /**
   * The server writes every forwarded event stream that has a relay through it (the Node entry's
   * own server: proxy/forwarded-response.ts takeRelay), so such a Response is made without a web
   * body. Off for anything else that reads the Response (app.request, Workers).
   */
  relayedStreams?: boolean
  /** Epoch ms; tests may pin it. */
  now?: () => number
  /**
   * The client's "gone" signal for a forwarded request (default: the request's AbortSignal). The
   * Node entry reads it off its response (entries/client-signal.ts): no AbortController per request.
   */
  clientSignal?: (c: Context<AppEnv>) => ClientSignal
  /** sha256 of API keys and the request signature (default: Web Crypto; the Node entry: node:crypto). */
  digest?: Digest
  /**
   * Where conversations were last served (Redis-backed, its reads riding on the tokens/min call).
   * Without it the app keeps an isolate-local memory: the ring still places keys, every edge alike.
   */
  affinity?: AffinityDeps
}

export interface AffinityDeps {
  memory: AffinityMemory
  /** Carries the memory's reads on the limiter's calls (redis/read-along.ts). */
  readAlong?: ReadAlong
}

/** One structured log line per request (latency/observe-request.ts builds it; each entry picks where it goes). */
export type LogLine = (line: Record<string, unknown>) => void

/** The validated generate request and the exact bytes that are forwarded. */
export interface GenerateInput {
  codec: DialectCodec
  gen: GenerateRequest
  body: Uint8Array
}

/** What routes/generate.ts knows once a node answered; latency/observe-request.ts records it. */
export interface Forwarded {
  nodeRegion: string
  failovers: number
  /** How cache-affine routing placed it (routing/affinity-route.ts). */
  affinity: AffinityReason
  /** Settles when the body ends, breaks or the client leaves. */
  finished: Promise<BodyOutcome>
}

export interface RateLimitState {
  requests?: LimitDecision
  tokens?: LimitDecision
  /** Tokens charged up front for this request (refunded if it is refused later). */
  chargedTokens?: number
}

/** The requests/min check of one request, started before the body is read (middleware/requests-limit.ts). */
export interface RequestsCheck {
  decision: Promise<LimitDecision>
  /** Set once the decision is in. */
  settled?: LimitDecision
}

export interface AppEnv {
  Variables: {
    /** background.ts: keeps work alive after the response. */
    waitUntil: (work: Promise<unknown>) => void
    /** request-id.ts */
    requestId: string
    /** request-id.ts: this hop's span (the node's parent) as its `traceparent` header, formatted once. */
    traceparent: string
    /** request-id.ts: epoch ms when the edge saw the request. */
    startedAtMs: number
    /** auth.ts */
    principal: Principal
    /** rate-limit.ts */
    rateLimit: RateLimitState
    /** rate-limit.ts openLimits: the dialect of a limited route's rate-limit headers; unset on other routes. */
    limitCodec?: DialectCodec
    /** requests-limit.ts: the requests/min check in flight while the body is read. */
    requestsCheck: RequestsCheck
    /** validate.ts */
    generate: GenerateInput
    /** affinity-key.ts (middleware): the request's affinity key; unset with AFFINITY=off. */
    affinity?: AffinityKey
    /** routes/generate.ts, once a node answered: what latency/observe-request.ts records. */
    forwarded: Forwarded
    /** routes/generate.ts: the response was made with the edge's own headers in it (request id, limits). */
    edgeHeadersAdded?: boolean
  }
}

/**
 * Work before and after the rest of the app for every request (middleware/around.ts runs the
 * befores in order, the afters in reverse); plain functions, no middleware frame of their own.
 */
export interface Around {
  before?(c: Context<AppEnv>): void
  after?(c: Context<AppEnv>): void
}
