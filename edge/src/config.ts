/**
 * Edge configuration (DESIGN.md §3): Workers bindings or the Node entry's environment, parsed
 * once with zod into one typed EdgeConfig that is passed down. Nothing else reads env.
 * Errors list every bad variable by name, never its value (several are secrets).
 */
import { z } from 'zod'
import { configError, envFlag as flag, envFlagOn as flagOn, envInt as int, issueLines, pickKnown } from '../../shared/src/env-config.ts'

const lat = z.coerce.number().min(-90).max(90)
const lon = z.coerce.number().min(-180).max(180)

/** One entry of GPU_NODES: the static fallback table used when the registry is unreachable or empty. */
export const StaticNode = z.strictObject({
  id: z.string().min(1),
  url: z.url({ protocol: /^https?$/ }),
  region: z.string().min(1),
  lat,
  lon,
  /** Models served; absent means "any" (the node itself answers 404 for a model it lacks). */
  models: z.array(z.string().min(1)).optional(),
})
export type StaticNode = z.infer<typeof StaticNode>

/** GPU_NODES arrives as a JSON string (env, wrangler secret) or already parsed (a wrangler [vars] array). */
const GpuNodes = z.preprocess((v) => {
  if (typeof v !== 'string') return v
  if (v.trim() === '') return []
  try {
    return JSON.parse(v)
  } catch {
    return v // reported as "expected array" below
  }
}, z.array(StaticNode).default([]))

const EnvSchema = z.object({
  UPSTASH_REDIS_REST_URL: z.url({ protocol: /^https?$/ }),
  UPSTASH_REDIS_REST_TOKEN: z.string().min(1),
  EDGE_SHARED_SECRET: z.string().min(16, 'must be at least 16 characters'),
  GPU_NODES: GpuNodes,
  ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  RATE_LIMIT_FAILURE_MODE: z.enum(['open', 'closed']).default('open'),
  RATE_LIMIT_TIMEOUT_MS: int(1, 60_000).default(300),
  MAX_BODY_BYTES: int(1).default(1024 * 1024),
  DEFAULT_RPM: int(1).default(60),
  DEFAULT_TPM: int(1).default(100_000),
  EDGE_REGION: z.string().min(1).default('local'),
  EDGE_LAT: lat.default(0),
  EDGE_LON: lon.default(0),
  UPSTREAM_CONNECT_TIMEOUT_MS: int(1, 600_000).default(2000),
  /** Node entry: `auto` reaches the edge's own region's nodes over HTTP/1.1, the others over HTTP/2; `h2`: HTTP/2 to all (proxy/node-upstream.ts). */
  UPSTREAM_PROTOCOL: z.enum(['auto', 'h2']).default('auto'),
  /** A streaming node silent this long mid-stream is treated as dead and the stream resumed (proxy/forward.ts). */
  STREAM_STALL_MS: int(1, 600_000).default(15_000),
  /** Continuations per stream after its node fails (DESIGN.md §4 Resume); 0 turns resume off. */
  MAX_RESUMES: int(0, 10).default(2),
  /** How long a node may take to answer a non-streaming request; also sets x-zl-deadline-ms. */
  REQUEST_TIMEOUT_MS: int(1).default(300_000),
  /** Cache-affine routing (edge/README.md): `off` routes as before, for comparisons. */
  AFFINITY: z.enum(['on', 'off', '1', '0', 'true', 'false']).default('on'),
  /** c of bounded-load hashing: a node may take a key while its load stays within c × the region's mean. */
  AFFINITY_BALANCE_FACTOR: z.coerce.number().min(1).max(10).default(1.25),
  /** How long `zl:aff:<hash>` remembers where a conversation was served (Redis TTL). */
  AFFINITY_TTL_MS: int(1000, 24 * 3_600_000).default(15 * 60_000),
  /** Latency samples per Redis batch: a fuller batch is written before its second is up (batching-recorder.ts). */
  LATENCY_BATCH_MAX_SAMPLES: int(1, 100_000).default(2000),
  DEV_MODE: flag,
  /** One JSON log line per request (default on); tests turn it off to keep their output readable. */
  REQUEST_LOG: flagOn,
})

export interface EdgeConfig {
  upstash: { url: string; token: string }
  /** HMAC key for x-zl-signature (DESIGN.md §4). */
  edgeSharedSecret: string
  gpuNodes: StaticNode[]
  /** Grants /v1/regions and all-tenant stats; undefined disables admin access. */
  adminToken?: string
  /** What a Redis failure in the rate limiter means: admit (open) or refuse (closed). */
  rateLimitFailureMode: 'open' | 'closed'
  rateLimitTimeoutMs: number
  maxBodyBytes: number
  /** Requests per minute for keys whose record says 0. */
  defaultRpm: number
  /** Tokens per minute for keys whose record says 0. */
  defaultTpm: number
  edgeRegion: string
  /** This edge's own location: the client's stand-in when request.cf has no coordinates. */
  edgeLat: number
  edgeLon: number
  /** Until the node's response headers, for streaming requests (a streaming node answers at once). */
  upstreamConnectTimeoutMs: number
  /** UPSTREAM_PROTOCOL (Node entry only; on Workers, Cloudflare owns the connections to origins). */
  upstreamProtocol: 'auto' | 'h2'
  streamStallMs: number
  maxResumes: number
  /** Until the node's response headers for non-streaming requests, and the deadline sent to the node. */
  requestTimeoutMs: number
  /** Cache-affine routing (routing/affinity-route.ts). */
  affinity: AffinityConfig
  /** LATENCY_BATCH_MAX_SAMPLES. */
  latencyBatchMaxSamples: number
  /** Local development only: honours `x-zl-client-geo`. Never set in production configs. */
  devMode: boolean
  /** Write the per-request JSON log line (latency/observe-request.ts). */
  requestLog: boolean
}

export interface AffinityConfig {
  /** AFFINITY=off: no affinity key, no Redis reads or writes for it, today's routing. */
  enabled: boolean
  /** c ≥ 1 (AFFINITY_BALANCE_FACTOR). */
  balanceFactor: number
  /** AFFINITY_TTL_MS. */
  ttlMs: number
}

/** Parses Workers bindings or process.env; throws one Error naming every bad variable. */
export function parseEdgeConfig(env: Record<string, unknown>): EdgeConfig {
  const parsed = EnvSchema.safeParse(pickKnown(env, Object.keys(EnvSchema.shape)))
  if (!parsed.success) throw configError('edge', issueLines(parsed.error))
  const e = parsed.data
  return {
    upstash: { url: e.UPSTASH_REDIS_REST_URL, token: e.UPSTASH_REDIS_REST_TOKEN },
    edgeSharedSecret: e.EDGE_SHARED_SECRET,
    gpuNodes: e.GPU_NODES,
    ...(e.ADMIN_TOKEN !== undefined ? { adminToken: e.ADMIN_TOKEN } : {}),
    rateLimitFailureMode: e.RATE_LIMIT_FAILURE_MODE,
    rateLimitTimeoutMs: e.RATE_LIMIT_TIMEOUT_MS,
    maxBodyBytes: e.MAX_BODY_BYTES,
    defaultRpm: e.DEFAULT_RPM,
    defaultTpm: e.DEFAULT_TPM,
    edgeRegion: e.EDGE_REGION,
    edgeLat: e.EDGE_LAT,
    edgeLon: e.EDGE_LON,
    upstreamConnectTimeoutMs: e.UPSTREAM_CONNECT_TIMEOUT_MS,
    upstreamProtocol: e.UPSTREAM_PROTOCOL,
    streamStallMs: e.STREAM_STALL_MS,
    maxResumes: e.MAX_RESUMES,
    requestTimeoutMs: e.REQUEST_TIMEOUT_MS,
    affinity: { enabled: ['on', '1', 'true'].includes(e.AFFINITY), balanceFactor: e.AFFINITY_BALANCE_FACTOR, ttlMs: e.AFFINITY_TTL_MS },
    latencyBatchMaxSamples: e.LATENCY_BATCH_MAX_SAMPLES,
    devMode: e.DEV_MODE,
    requestLog: e.REQUEST_LOG,
  }
}

const ServerSchema = z.object({
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: int(0, 65535).default(8788),
  TLS_CERT: z.string().min(1).optional(),
  TLS_KEY: z.string().min(1).optional(),
})

/** The Node entry's own settings (on top of EdgeConfig). */
export interface NodeServerConfig {
  host: string
  port: number
  /** PEM file paths; both set → HTTPS with ALPN h2 + http/1.1, neither → plain HTTP/1.1. */
  tls?: { certFile: string; keyFile: string }
}

export function parseNodeServerConfig(env: Record<string, unknown>): NodeServerConfig {
  const parsed = ServerSchema.safeParse(pickKnown(env, Object.keys(ServerSchema.shape)))
  if (!parsed.success) throw configError('edge (Node entry)', issueLines(parsed.error))
  const e = parsed.data
  if (Boolean(e.TLS_CERT) !== Boolean(e.TLS_KEY)) throw configError('edge (Node entry)', ['TLS_CERT/TLS_KEY: set both or neither'])
  return { host: e.HOST, port: e.PORT, ...(e.TLS_CERT && e.TLS_KEY ? { tls: { certFile: e.TLS_CERT, keyFile: e.TLS_KEY } } : {}) }
}
