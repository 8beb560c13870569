/**
 * The self-hosted edge: the same app under @hono/node-server. With TLS_CERT/TLS_KEY it serves
 * HTTPS with ALPN choosing h2 or http/1.1 (`http2.createSecureServer({ allowHTTP1: true })`);
 * without, plain HTTP/1.1. Upstream requests go through undici, one multiplexed HTTP/2
 * connection per GPU node. A closed client connection aborts the request's AbortSignal
 * (@hono/node-server), which forward.ts turns into an aborted upstream request.
 */
import { readFileSync } from 'node:fs'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { serve, type ServerType } from '@hono/node-server'
import { Redis } from '@upstash/redis'
import { createApp, type EdgeDeps } from './app.ts'
import type { EdgeConfig, NodeServerConfig } from './config.ts'
import { readDashboardAssets } from './dashboard/file-assets.ts'
import { createRedisBackedDeps, redisClientOptions } from './redis-deps.ts'
import { createUndiciUpstream, type UndiciUpstream, type UndiciUpstreamOptions } from './proxy/undici-upstream.ts'

/** Connection-level headers HTTP/2 forbids; Node's http2 compat layer throws on them. */
const CONNECTION_HEADERS = ['transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'proxy-connection']

export interface NodeEdge {
  url: string
  upstream: UndiciUpstream
  close(): Promise<void>
}

export interface NodeEdgeOptions {
  /** Replaces parts of the wiring (tests). */
  overrides?: Partial<EdgeDeps>
  upstreamTls?: UndiciUpstreamOptions['tls']
}

export async function startNodeEdge(config: EdgeConfig, server: NodeServerConfig, opts: NodeEdgeOptions = {}): Promise<NodeEdge> {
  const upstream = createUndiciUpstream({ connectTimeoutMs: config.upstreamConnectTimeoutMs, ...(opts.upstreamTls ? { tls: opts.upstreamTls } : {}) })
  // Node's waitUntil: background work (latency records, refunds) is tracked so close() can finish it.
  const pending = new Set<Promise<unknown>>()
  const waitUntil = (work: Promise<unknown>) => {
    pending.add(work)
    void work.finally(() => pending.delete(work))
  }
  const app = createApp({ ...createNodeDeps(config, upstream), waitUntil, ...opts.overrides })
  const fetch = async (req: Request) => withoutConnectionHeaders(await app.fetch(req))
  const tls = server.tls ? { key: readFileSync(server.tls.keyFile), cert: readFileSync(server.tls.certFile) } : undefined

  let listening!: (info: AddressInfo) => void
  const ready = new Promise<AddressInfo>((resolve) => (listening = resolve))
  const httpServer: ServerType = tls
    ? serve({ fetch, hostname: server.host, port: server.port, overrideGlobalObjects: false, createServer: http2.createSecureServer, serverOptions: { ...tls, allowHTTP1: true } }, listening)
    : serve({ fetch, hostname: server.host, port: server.port, overrideGlobalObjects: false }, listening)
  const address = await ready
  const host = address.address.includes(':') ? `[${address.address}]` : address.address
  return {
    url: `${tls ? 'https' : 'http'}://${host}:${address.port}`,
    upstream,
    async close() {
      await new Promise<void>((resolve) => {
        httpServer.close(() => resolve())
        ;(httpServer as { closeAllConnections?: () => void }).closeAllConnections?.()
      })
      await Promise.allSettled([...pending])
      await upstream.close()
    },
  }
}

export function createNodeDeps(config: EdgeConfig, upstream: UndiciUpstream): EdgeDeps {
  return {
    config,
    ...createRedisBackedDeps(config, (timeoutMs) => new Redis(redisClientOptions(config, timeoutMs))),
    upstream: upstream.fetch,
    dashboardAssets: readDashboardAssets(),
  }
}

/** HTTP/2 responses must not carry connection-level headers (honojs/hono#4041 crashes the process). */
function withoutConnectionHeaders(res: Response): Response {
  if (!CONNECTION_HEADERS.some((h) => res.headers.has(h))) return res
  const headers = new Headers(res.headers)
  for (const h of CONNECTION_HEADERS) headers.delete(h)
  return new Response(res.body, { status: res.status, statusText: res.statusText, headers })
}
