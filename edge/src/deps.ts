/**
 * What the app is built from. The entries' composition root (entries/compose-edge.ts) builds it
 * from config and each runtime's clients; tests replace parts of it.
 */
import type { Context } from 'hono'
import type { Digest } from '../../shared/src/digest.ts'
import type { ResponsesStore } from '../../shared/src/dialects/responses-store.ts'
import type { EdgeConfig } from './config.ts'
import type { AppEnv, Background, LogLine } from './context.ts'
import type { DashboardAssets } from './dashboard/dashboard-assets.ts'
import type { KeyStore } from './keys/key-store.ts'
import type { LatencyRecorder } from './latency/latency-recorder.ts'
import type { LatencyReader } from './latency/redis-latency-store.ts'
import type { RateLimiter } from './limits/rate-limiter.ts'
import type { ClientSignal, UpstreamFetch } from './proxy/upstream-fetch.ts'
import type { ReadAlong } from './redis/read-along.ts'
import type { AffinityMemory } from './routing/affinity-memory.ts'
import type { NodeRegistry } from './routing/node-registry.ts'
import type { SupersedeLedger } from './routing/supersede-ledger.ts'

export interface EdgeDeps {
  config: EdgeConfig
  keys: KeyStore
  limiter: RateLimiter
  registry: NodeRegistry
  /** fetch on Workers; undici with one HTTP/2 connection per node on the Node entry. */
  upstream: UpstreamFetch
  /** Gets one sample per generate request after its response ended (Redis, Analytics Engine). */
  latency?: LatencyRecorder
  /** Where each supersede group's newest request runs (without one, only a node's own requests supersede each other). */
  supersede?: SupersedeLedger
  /** Stored responses, which GPU nodes write (GET and DELETE /v1/responses/{id}: 404 without one). */
  responses?: ResponsesStore
  /** Reads the latency histograms for /v1/stats/latency (404 without one). */
  latencyReader?: LatencyReader
  /** The /dashboard page and its assets (404 without them); each entry bundles its own. */
  dashboardAssets?: DashboardAssets
  /** The per-request JSON log line (default: console.log). */
  log?: LogLine
  /** Keeps background work alive after the response (Workers' ctx.waitUntil is used when present). */
  waitUntil?: Background
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
