/**
 * GPU node configuration: the environment is parsed once, at boot, into one typed NodeConfig
 * that is passed down. Nothing else in the node reads process.env.
 */
import { DEFAULT_PREFIX_BLOCK_TOKENS } from './model/runner.ts'
import { hostname } from 'node:os'
import { z } from 'zod'
import { configError, envFlag as flag, envFlagOn as flagDefaultOn, envInt as int, issueLines, pickKnown } from '../../shared/src/env-config.ts'
import type { EngineLimits } from './engine/types.ts'
import { DEFAULT_SPEC_MAX_DRAFT } from './engine/speculation.ts'
import { DEFAULT_RESPONSES_MAX_BYTES_PER_TENANT, DEFAULT_RESPONSES_TTL_MS, type ResponsesStoreLimits } from '../../shared/src/dialects/responses-store.ts'
import { TOOL_CALL_FORMATS, type ToolCallFormatName } from './structured/tool-call-format.ts'

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v))

/** The model a node serves when MODEL_DIR is not set: the trained code model (trained/zl-code/README.md). */
export const DEFAULT_MODEL_DIR = 'trained/zl-code'

const EnvSchema = z.object({
  MODEL_DIR: z.string().min(1).default(DEFAULT_MODEL_DIR),
  MODEL_FILE: optionalString,
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: int(0, 65535).default(9101),
  NODE_ID: optionalString,
  REGION: z.string().min(1).default('local'),
  REGION_LAT: z.coerce.number().min(-90).max(90).default(0),
  REGION_LON: z.coerce.number().min(-180).max(180).default(0),
  PUBLIC_URL: z.url().optional(),
  EDGE_SHARED_SECRET: optionalString,
  ALLOW_UNSIGNED: flag,
  UPSTASH_REDIS_REST_URL: z.url().optional(),
  UPSTASH_REDIS_REST_TOKEN: optionalString,
  /** Stored responses (Responses API `store`) live this long, in the Upstash Redis above. */
  RESPONSES_TTL_S: int(1).default(DEFAULT_RESPONSES_TTL_MS / 1000),
  /** A tenant's stored responses stay under this many MiB: its oldest go first. */
  RESPONSES_MAX_MB_PER_TENANT: int(1).default(DEFAULT_RESPONSES_MAX_BYTES_PER_TENANT / (1024 * 1024)),
  MAX_BATCH: int(1, 4096).default(32),
  MAX_QUEUE: int(0).default(256),
  /**
   * Refuse (503, retry-after-ms) when a new request's estimated wait for its first token exceeds
   * this; 0 (the default, as vLLM queues): only MAX_QUEUE bounds the queue. Off by default because
   * the right bound depends on the hardware: on CPU the small model's 16 concurrent 512-token
   * prompts wait 12 s (bench prefix), where a GPU answers in well under one.
   */
  MAX_QUEUE_WAIT_MS: int(0).default(0),
  KV_BUDGET_MB: int(1).default(512),
  PREFILL_CHUNK: int(1).default(128),
  /** The automatic prefix cache's own budget (0 turns it off), beside KV_BUDGET_MB. */
  PREFIX_CACHE_MB: int(0).default(256),
  PREFIX_BLOCK_TOKENS: int(1, 1024).default(DEFAULT_PREFIX_BLOCK_TOKENS),
  /** Speculative decoding by prompt lookup (engine/speculation.ts): `auto` where it pays, `on` whenever a draft is found, `off`. */
  SPEC_DECODING: z.enum(['auto', 'on', 'off']).default('auto'),
  /** Draft tokens verified per row and step, at most. */
  SPEC_MAX_DRAFT: int(1, 32).default(DEFAULT_SPEC_MAX_DRAFT),
  /**
   * While interactive requests are live, batch-class rows take at most this many of the batch's
   * MAX_BATCH rows (engine/scheduler.ts, batchRowsAllowed); 0 (the default): no limit. For a node
   * whose step time grows with its rows (a CPU): shorter steps for interactive arrivals to wait
   * out, less batch throughput. On a GPU, where reading the weights bounds a decode step, fewer
   * rows should hardly be faster (not measured here): leave it at 0.
   */
  BATCH_ROWS_BESIDE_INTERACTIVE: int(0, 4096).default(0),
  EXECUTION_PROVIDER: z.enum(['cpu', 'cuda']).default('cpu'),
  /** 0 lets ONNX Runtime choose. */
  INTRA_OP_THREADS: int(0, 1024).default(0),
  SLOT_KV_EDIT: flagDefaultOn,
  /** How the model writes tool calls (vLLM's --tool-call-parser); `auto` reads it from the chat template. */
  TOOL_CALL_FORMAT: z.enum(['auto', ...TOOL_CALL_FORMATS]).default('auto'),
  /**
   * A grammar new to the node must compile within this on a trial thread before the model worker
   * compiles it (structured/compile-trial.ts): the steps in flight wait for that compile. 0: no trial.
   */
  GRAMMAR_COMPILE_BUDGET_MS: int(0, 60_000).default(1000),
  TLS_CERT: optionalString,
  TLS_KEY: optionalString,
  MAX_BODY_BYTES: int(1).default(1024 * 1024),
  KEEPALIVE_MS: int(1).default(5000),
  DRAIN_GRACE_MS: int(0).default(2000),
})

export interface NodeConfig {
  modelDir: string
  /** The ONNX graph inside modelDir; undefined: the first of the usual export names present. */
  modelFile?: string
  host: string
  port: number
  nodeId: string
  region: string
  lat: number
  lon: number
  /** The URL the edge uses to reach this node (heartbeat); main derives it from the bound address when unset. */
  publicUrl?: string
  /** undefined only when allowUnsigned is set (checked at parse time). */
  edgeSharedSecret?: string
  allowUnsigned: boolean
  /** Registry heartbeat target and response store; both set or neither is there. */
  upstash?: { url: string; token: string }
  /** How stored responses are bounded (dialects/responses-store.ts). */
  responsesStore: ResponsesStoreLimits
  /** Handed to the engine (and the runner's KV budget) as they are. */
  limits: EngineLimits
  executionProvider: 'cpu' | 'cuda'
  /** 0 = ONNX Runtime default. */
  intraOpThreads: number
  /**
   * Load an Optimum-layout (concat KV) graph edited onto the slot KV path where that is exact
   * (model/slot-kv-edit.ts). Off only to compare with the unedited concat path.
   */
  slotKvEdit: boolean
  /** The tool-call format to constrain and parse; undefined: the chat template's (tool-call-format.ts). */
  toolCallFormat?: ToolCallFormatName
  /** What a new grammar may take to compile (its trial); 0: no trial. */
  compileBudgetMs: number
  /** PEM file paths; both set or plaintext (HTTP/1.1 + h2c). */
  tls?: { certFile: string; keyFile: string }
  maxBodyBytes: number
  /** Interval of `: keep-alive` SSE comments while a stream waits for its first token. */
  keepAliveMs: number
  /** A second SIGINT later than this after the first forces exit; earlier ones are the same drain. */
  drainGraceMs: number
}

/** Parses the environment; throws one Error listing every bad variable (never their values). */
export function parseNodeConfig(env: Record<string, string | undefined>): NodeConfig {
  const raw = pickKnown(env, Object.keys(EnvSchema.shape)) as Record<string, string | undefined>
  const parsed = EnvSchema.safeParse(raw)
  const problems = parsed.success ? [] : issueLines(parsed.error)
  // Cross-variable rules look at presence only, so they are reported alongside type errors.
  const on = (v: string | undefined) => v === '1' || v === 'true'
  if (!raw.EDGE_SHARED_SECRET && !on(raw.ALLOW_UNSIGNED)) {
    problems.push('EDGE_SHARED_SECRET: required (or set ALLOW_UNSIGNED=1 for local direct use only)')
  }
  if (Boolean(raw.UPSTASH_REDIS_REST_URL) !== Boolean(raw.UPSTASH_REDIS_REST_TOKEN)) {
    problems.push('UPSTASH_REDIS_REST_URL/UPSTASH_REDIS_REST_TOKEN: set both or neither')
  }
  if (Boolean(raw.TLS_CERT) !== Boolean(raw.TLS_KEY)) problems.push('TLS_CERT/TLS_KEY: set both or neither')
  const e = parsed.data
  if (e && e.BATCH_ROWS_BESIDE_INTERACTIVE > e.MAX_BATCH) problems.push(`BATCH_ROWS_BESIDE_INTERACTIVE: at most MAX_BATCH (${e.MAX_BATCH}); 0 for no limit`)
  if (problems.length > 0 || !e) throw configError('gpu-node', problems)

  return {
    modelDir: e.MODEL_DIR,
    modelFile: e.MODEL_FILE,
    host: e.HOST,
    port: e.PORT,
    nodeId: e.NODE_ID ?? `${e.REGION}-${hostname()}-${e.PORT}`,
    region: e.REGION,
    lat: e.REGION_LAT,
    lon: e.REGION_LON,
    publicUrl: e.PUBLIC_URL,
    edgeSharedSecret: e.EDGE_SHARED_SECRET,
    allowUnsigned: e.ALLOW_UNSIGNED,
    upstash: e.UPSTASH_REDIS_REST_URL && e.UPSTASH_REDIS_REST_TOKEN ? { url: e.UPSTASH_REDIS_REST_URL, token: e.UPSTASH_REDIS_REST_TOKEN } : undefined,
    responsesStore: { ttlMs: e.RESPONSES_TTL_S * 1000, maxBytesPerTenant: e.RESPONSES_MAX_MB_PER_TENANT * 1024 * 1024 },
    limits: { maxBatch: e.MAX_BATCH, maxQueue: e.MAX_QUEUE, kvBudgetBytes: e.KV_BUDGET_MB * 1024 * 1024, prefillChunkTokens: e.PREFILL_CHUNK, prefixCacheBytes: e.PREFIX_CACHE_MB * 1024 * 1024, prefixBlockTokens: e.PREFIX_BLOCK_TOKENS, maxQueueWaitMs: e.MAX_QUEUE_WAIT_MS, speculation: { mode: e.SPEC_DECODING, maxDraft: e.SPEC_MAX_DRAFT }, ...(e.BATCH_ROWS_BESIDE_INTERACTIVE > 0 ? { batchRowsBesideInteractive: e.BATCH_ROWS_BESIDE_INTERACTIVE } : {}) },
    executionProvider: e.EXECUTION_PROVIDER,
    intraOpThreads: e.INTRA_OP_THREADS,
    slotKvEdit: e.SLOT_KV_EDIT,
    toolCallFormat: e.TOOL_CALL_FORMAT === 'auto' ? undefined : e.TOOL_CALL_FORMAT,
    compileBudgetMs: e.GRAMMAR_COMPILE_BUDGET_MS,
    tls: e.TLS_CERT && e.TLS_KEY ? { certFile: e.TLS_CERT, keyFile: e.TLS_KEY } : undefined,
    maxBodyBytes: e.MAX_BODY_BYTES,
    keepAliveMs: e.KEEPALIVE_MS,
    drainGraceMs: e.DRAIN_GRACE_MS,
  }
}

/** The URL peers can dial for a server bound to `host`:`port` (a wildcard bind advertises loopback). */
export function localUrl(scheme: 'http' | 'https', host: string, port: number): string {
  const h = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') && !host.startsWith('[') ? `[${host}]` : host
  return `${scheme}://${h}:${port}`
}
