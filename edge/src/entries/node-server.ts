/**
 * The self-hosted edge: the same app under @hono/node-server. With TLS_CERT/TLS_KEY it serves
 * HTTPS with ALPN choosing h2 or http/1.1 (`http2.createSecureServer({ allowHTTP1: true })`);
 * without, plain HTTP/1.1. Upstream requests to the GPU nodes of the edge's own region go over an
 * HTTP/1.1 keep-alive pool per node, to every other node over one multiplexed HTTP/2 connection
 * (proxy/node-upstream.ts, UPSTREAM_PROTOCOL). A closed client connection aborts the request's
 * AbortSignal (@hono/node-server), which forward.ts turns into an aborted upstream request.
 * Per-request CPU: hashing and signing use node:crypto synchronously (nodeDigest) instead of
 * Web Crypto's thread-pool jobs, and the @upstash/redis clients talk REST over one undici keep-alive
 * Pool (redis/undici-redis-requester.ts) instead of the global fetch.
 */
import { readFileSync } from 'node:fs'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { serve, type ServerType } from '@hono/node-server'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import { Redis } from '@upstash/redis'
import type { Pool } from 'undici'
import { nodeDigest } from '../../../shared/src/node-digest.ts'
import { ClientCloseSignal, type ClosingRequest, type ClosingResponse } from './client-signal.ts'
import { createApp } from '../app.ts'
import type { EdgeDeps } from '../deps.ts'
import { createBufferedLog } from '../latency/buffered-log.ts'
import { DEFAULT_BATCHING } from '../latency/batching-recorder.ts'
import type { EdgeConfig, NodeServerConfig } from '../config.ts'
import { readDashboardAssets } from '../dashboard/file-assets.ts'
import { composeEdgeDeps } from './compose-edge.ts'
import { forwardedFacts, takeRelay } from '../proxy/forwarded-response.ts'
import type { RelayOut } from '../proxy/pass-through.ts'
import { isServing } from '../routing/pick-node.ts'
import { createNodeUpstream, type NodeUpstream } from '../proxy/node-upstream.ts'
import type { UpstreamTls } from '../proxy/upstream-common.ts'
import { createUpstashPool, UndiciRedisRequester } from '../redis/undici-redis-requester.ts'

/**
 * How long an idle client connection stays open. Node's default (5 s) makes a client that pauses
 * a few seconds between calls open a new connection (and, with TLS, do a new handshake) each
 * time; this outlasts the 60 s idle timeouts of common load balancers and client pools.
 */
export const CLIENT_KEEP_ALIVE_MS = 75_000

/**
 * How often the table's serving nodes are checked for an open upstream connection (node-upstream.ts
 * `warm`): a connection that closed (idle keep-alive, a node's restart) is open again within this,
 * before a request needs it. An open connection costs nothing to check.
 */
export const UPSTREAM_WARM_INTERVAL_MS = 2000

/** Connection-level headers HTTP/2 forbids; Node's http2 compat layer throws on them. */
const CONNECTION_HEADERS = ['transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'proxy-connection']

export interface NodeEdge {
  url: string
  upstream: NodeUpstream
  /** Settles once the first round of upstream connections (one per serving node) has been tried. */
  warmed: Promise<void>
  close(): Promise<void>
}

export interface NodeEdgeOptions {
  /** Replaces parts of the wiring (tests). */
  overrides?: Partial<EdgeDeps>
  upstreamTls?: UpstreamTls
}

export async function startNodeEdge(config: EdgeConfig, server: NodeServerConfig, opts: NodeEdgeOptions = {}): Promise<NodeEdge> {
  const upstream = createNodeUpstream({
    protocol: config.upstreamProtocol,
    localRegion: config.edgeRegion,
    connectTimeoutMs: config.upstreamConnectTimeoutMs,
    ...(opts.upstreamTls ? { tls: opts.upstreamTls } : {}),
  })
  // Node's waitUntil: background work (latency records, refunds) is tracked so close() can finish it.
  const pending = new Set<Promise<unknown>>()
  const waitUntil = (work: Promise<unknown>) => {
    pending.add(work)
    void work.finally(() => pending.delete(work))
  }
  const redisPool = createUpstashPool(config.upstash.url)
  const requestLog = createBufferedLog()
  // relayedStreams: sendForwarded below takes every forwarded event stream's relay.
  const deps: EdgeDeps = { ...createNodeDeps(config, upstream, redisPool), ...(config.requestLog ? { log: requestLog.log } : {}), waitUntil, relayedStreams: true, ...opts.overrides }
  const app = createApp(deps)
  const warmUpstreams = async () => {
    const table = await deps.registry.table()
    const t = Date.now()
    await upstream.warm(table.nodes.filter((n) => isServing(n, t)))
  }
  const warmed = warmUpstreams().catch(() => {})
  const warmer = setInterval(() => void warmUpstreams().catch(() => {}), UPSTREAM_WARM_INTERVAL_MS)
  warmer.unref()
  const fetch = async (req: Request, env?: NodeBindings) => {
    // The adapter's incoming/outgoing pair becomes c.env: the client signal is read off it.
    const res = await app.fetch(req, env)
    const sent = sendForwarded(res, env?.outgoing)
    if (sent) return sent
    return env?.incoming?.httpVersionMajor === 2 ? withoutConnectionHeaders(res) : streamAtOnce(res)
  }
  const tls = server.tls ? { key: readFileSync(server.tls.keyFile), cert: readFileSync(server.tls.certFile) } : undefined

  let listening!: (info: AddressInfo) => void
  const ready = new Promise<AddressInfo>((resolve) => (listening = resolve))
  // overrideGlobalObjects: the process's Request and Response become @hono/node-server's
  // lightweight ones, which keep a string or byte body as is and write it with the headers in one
  // call, where the web Response builds a stream around every body (see the edge section of
  // docs/PERFORMANCE.md). The edge process hosts nothing else, so the swap is safe.

  const httpServer: ServerType = tls
    ? serve({ fetch, hostname: server.host, port: server.port, overrideGlobalObjects: true, createServer: http2.createSecureServer, serverOptions: { ...tls, allowHTTP1: true } }, listening)
    : serve({ fetch, hostname: server.host, port: server.port, overrideGlobalObjects: true }, listening)
  ;(httpServer as { keepAliveTimeout?: number }).keepAliveTimeout = CLIENT_KEEP_ALIVE_MS
  const address = await ready
  const host = address.address.includes(':') ? `[${address.address}]` : address.address
  return {
    url: `${tls ? 'https' : 'http'}://${host}:${address.port}`,
    upstream,
    warmed,
    async close() {
      clearInterval(warmer)
      await new Promise<void>((resolve) => {
        httpServer.close(() => resolve())
        ;(httpServer as { closeAllConnections?: () => void }).closeAllConnections?.()
      })
      // Background work may record a latency sample into an open batch: write it now, not after
      // the batch timer (twice: the first round's work can add samples).
      for (let round = 0; round < 2; round++) {
        void deps.latency?.flush?.()
        await Promise.allSettled([...pending])
      }
      requestLog.flush()
      await Promise.all([upstream.close(), redisPool.close()])
    },
  }
}

/**
 * The Node wiring. Every @upstash/redis client (each with its own per-call timeout) goes through
 * `redisPool`: `new Redis(requester)` takes none of redisClientOptions' settings and needs none —
 * the requester never retries, never auto-pipelines, sends no telemetry, and bounds each call.
 */
export function createNodeDeps(config: EdgeConfig, upstream: NodeUpstream, redisPool: Pool): EdgeDeps {
  // A long-lived process: latency samples are summed and written once a second, and
  // concurrent requests share key lookups and exact rate-limit calls.
  return composeEdgeDeps(config, {
    redis: (timeoutMs) => new Redis(new UndiciRedisRequester({ url: config.upstash.url, token: config.upstash.token, timeoutMs, pool: redisPool })),
    upstream: upstream.fetch,
    latencyBatching: { ...DEFAULT_BATCHING, maxSamples: config.latencyBatchMaxSamples },
    coalesce: true,
    dashboardAssets: readDashboardAssets(),
    digest: nodeDigest,
    clientSignal: (c) => {
      const env = c.env as NodeBindings | undefined
      return env?.incoming && env.outgoing ? new ClientCloseSignal(env.outgoing, env.incoming) : c.req.raw.signal
    },
  })
}

/** What @hono/node-server passes as the fetch handler's env (c.env): the Node request and response. */
interface NodeBindings {
  incoming?: ClosingRequest & { httpVersionMajor?: number }
  outgoing?: RelayOut & NodeResponse & ClosingResponse
}

/** The slice of Node's HTTP/1.1 and HTTP/2 ServerResponse a relayed answer needs besides RelayOut. */
interface NodeResponse {
  writeHead(status: number, headers: Record<string, string>): unknown
}

/**
 * A forwarded response (proxy/forwarded-response.ts) is written from what the edge kept beside
 * it, never by reading its headers back. A token stream whose node pushes its chunks (its relay)
 * goes straight from the upstream (either protocol) into the client's response: no web stream, no
 * promise per chunk, and the node's opening frames leave in the same write as the headers;
 * @hono/node-server is then told the response is already sent. A whole answer goes back to the
 * adapter as is: its header record has no connection-level header (forward.ts drops them) and
 * is written without a Headers object. Undefined: not one of these (the generic path decides).
 */
function sendForwarded(res: Response, out: (RelayOut & NodeResponse) | undefined): Response | typeof RESPONSE_ALREADY_SENT | undefined {
  const forwarded = forwardedFacts(res)
  if (!forwarded) return undefined
  if (!forwarded.sse) return res
  const relay = out ? takeRelay(res) : undefined
  if (!out || !relay) return undefined
  out.writeHead(forwarded.status, forwarded.headers)
  relay(out)
  return RESPONSE_ALREADY_SENT
}

/**
 * HTTP/1.1: an event stream is declared chunked, which tells @hono/node-server to write each
 * chunk as it comes. Without it, the server reads ahead to compute a content-length and, when a
 * second chunk is not there yet, waits a timer tick (≥ 1 ms, longer under load) before sending
 * the headers and the first token — time added to every stream's first byte.
 */
function streamAtOnce(res: Response): Response {
  if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream') && res.body) res.headers.set('transfer-encoding', 'chunked')
  return res
}

/** HTTP/2 responses must not carry connection-level headers (honojs/hono#4041 crashes the process). */
function withoutConnectionHeaders(res: Response): Response {
  if (!CONNECTION_HEADERS.some((h) => res.headers.has(h))) return res
  const headers = new Headers(res.headers)
  for (const h of CONNECTION_HEADERS) headers.delete(h)
  return new Response(res.body, { status: res.status, statusText: res.statusText, headers })
}
