/**
 * What forward is asked and given: the request as the edge will send it, the edge's dependencies
 * for sending it, what comes back, and the bounds on retries and continuations.
 */
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import type { Digest } from '../../../shared/src/digest.ts'
import type { BodyOutcome } from '../context.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import type { ResumeOutcome } from './resumable-body.ts'
import type { ClientSignal, UpstreamFetch } from './upstream-fetch.ts'

/** Nodes asked for one request (hedges and failovers together), and per continuation. */
export const MAX_ATTEMPTS = 3

export interface ForwardRequest {
  /** URL pathname on the node, e.g. `/v1/chat/completions`. */
  path: string
  body: Uint8Array
  stream: boolean
  /**
   * A stream that may be continued on another node (DESIGN.md §4 Resume): every stream but one
   * with several choices (OpenAI `n`), whose id lines would have to say which choice a token is of.
   */
  resumable: boolean
  /** The client's dialect: shapes the error event of a stream that breaks. */
  codec: DialectCodec
  requestId: string
  traceparent: string
  tenant: string
  keyId: string
  priority: number
  /** x-zl-edge: colo or EDGE_REGION. */
  edge: string
  /** The client's: aborts the upstream request when the client leaves, before or after headers. */
  signal?: ClientSignal
  /** Epoch ms the edge received the request. */
  startedAtMs: number
  /** A stream's sampling seed, fixed here so a continuation is exact (used only where the body has none). */
  seed?: number
  /** A continuation: the tokens the client already has, and whether the finish flush too (x-zl-resume). */
  resume?: { tokens: readonly number[]; flushed: boolean }
  /** The x-zl-supersede key, sent on with startedAtMs as its order (x-zl-supersede-at). */
  supersede?: string
}

export interface ForwardDeps {
  upstream: UpstreamFetch
  secret: string
  /** Signs the request (default: Web Crypto; the Node entry passes node:crypto's). */
  digest?: Digest
  connectTimeoutMs: number
  requestTimeoutMs: number
  /** Skip a node in this isolate for `forMs` (default: the registry's mark-down time). */
  markDown: (nodeId: string, forMs?: number) => void
  now: () => number
  /** Continuations per stream after its node failed (default MAX_RESUMES); 0: off. */
  maxResumes?: number
  /** No bytes from a streaming node for this long counts as its death (default STREAM_STALL_MS). */
  stallMs?: number
  /** Counts resume attempts by outcome (a metric). */
  onResume?: (outcome: ResumeOutcome) => void
  /**
   * Where a continuation may go, best first, none of `exclude`: the caller re-ranks the current
   * node table by its own rule (generate.ts: affinity placement), since a stream can outlive the
   * table it was routed on. Default: the request's ranking less `exclude`.
   */
  resumeNodes?: (exclude: ReadonlySet<string>) => Promise<readonly RankedNode[]>
  /** A continuation is now served by `node` (load and affinity bookkeeping). */
  onResumedOn?: (node: RankedNode) => void
  /** EdgeDeps.relayedStreams: the server writes every forwarded event stream through its relay. */
  relayedStreams?: boolean
}

/** DESIGN.md §4 Resume: at most two continuations per stream, then the shaped error event. */
export const MAX_RESUMES = 2
/**
 * A node that sends nothing for this long mid-stream is treated as dead. Above the node's 5 s
 * keep-alive interval (sent while a stream waits for its first token) with room for a loaded
 * step; a token stream otherwise never pauses this long.
 */
export const STREAM_STALL_MS = 15_000

export interface ForwardResult {
  /** The answer's status: the node's (for an all-overloaded answer, the last one's). */
  status: number
  /**
   * The Response, made once, after `addEdgeHeaders` has written the edge's own headers (request
   * id, limits, affinity) into the node's record: one plain record, never a Headers object
   * edited after the fact (forwarded-response.ts), nor a second record copied into it.
   */
  respond(addEdgeHeaders?: (headers: Record<string, string>) => void): Response
  /** The node whose response this is (for an all-overloaded answer: the last one tried). */
  node: RankedNode
  failedAttempts: number
  /** Settles when the body ends, breaks or the client leaves. */
  finished: Promise<BodyOutcome>
}
