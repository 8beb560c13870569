/**
 * The per-request vocabulary: what the app's middlewares hand each other (Hono context variables,
 * each set by exactly one middleware, named beside it) and the nouns they are made of — who is
 * calling, what a limit decided, the request's affinity key and how it was placed, how its body
 * ended. Everything of the edge may use these words; this file uses none of the edge's.
 */
import type { Context } from 'hono'
import type { DialectCodec } from '../../shared/src/dialects/index.ts'
import type { GenerateRequest } from '../../shared/src/generation.ts'
import type { PriorityClass } from '../../shared/src/priority.ts'

/** Background work that should outlive the request that started it (Workers' waitUntil). */
export type Background = (work: Promise<unknown>) => void

/** Who is calling, after auth: never the key itself. */
export interface Principal {
  keyId: string
  tenant: string
  /** Effective limits (the deployment default already applied). */
  rpm: number
  tpm: number
  /** Allowed model ids, or ['*']. */
  models: string[]
  /** Authenticated with ADMIN_TOKEN rather than an API key. */
  admin: boolean
  /** The key's class: its requests' priority never runs ahead of it (shared/src/priority.ts). */
  priorityClass: PriorityClass
}

/** What a limit (requests/min, tokens/min) answered for one request. */
export interface LimitDecision {
  success: boolean
  limit: number
  /** What is left after this call (0 when refused). */
  remaining: number
  /** Epoch ms when the budget next grows (the window ends / the bucket refills). */
  resetAtMs: number
  /** The store failed; `success` is RATE_LIMIT_FAILURE_MODE's answer. */
  degraded?: boolean
}

/** Which requests are likely to share a cached prefix on a node (routing/affinity-key.ts derives it). */
export interface AffinityKey {
  /** 16 hex digits; the Redis key is `zl:aff:<hash>`. */
  hash: string
  /** The key's point on a region's hash ring (hash-ring.ts). */
  point: number
  /** What it was derived from (a log/metric label; never the text itself). */
  source: 'context-id' | 'prefix'
}

/**
 * How the request was placed, as the `x-zl-affinity` header and the latency record say:
 * - `hit`: on the node that should hold the key's prefix — where it was last served, or (a key
 *   seen nowhere yet) its ring home in the best region;
 * - `spread`: that node was over the load bound, or a new key's ring home was busier than
 *   another node, so the least-loaded node took it;
 * - `moved`: the key was last served elsewhere and that no longer pays (the extra RTT exceeds the
 *   prefill saved) or is no longer possible (node drained, stale, down or gone), or the chosen
 *   node failed and another answered;
 * - `none`: no affinity (AFFINITY=off).
 */
export type AffinityReason = 'hit' | 'spread' | 'moved' | 'none'

/** How a forwarded body ended (proxy/pass-through.ts). */
export interface BodyOutcome {
  kind: 'complete' | 'upstream_error' | 'client_gone'
  /** Epoch ms of the first byte handed to the client. */
  firstByteAtMs?: number
  /** Continuations on other nodes after the stream's node failed (resumable-body.ts). */
  resumes?: number
}

/** One structured log line per request (latency/observe-request.ts builds it; each entry picks where it goes). */
export type LogLine = (line: Record<string, unknown>) => void

/** The validated generate request and the exact bytes that are forwarded. */
export interface GenerateInput {
  codec: DialectCodec
  gen: GenerateRequest
  body: Uint8Array
  /** The x-zl-supersede key (shared/src/supersede.ts), validated. */
  supersede?: string
  /** The priority the request asked for in x-zl-priority, validated (its key's class applies later). */
  priorityAsk?: number
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
    waitUntil: Background
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
