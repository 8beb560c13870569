/**
 * Which connection the Node entry takes to a GPU node, by the node's region (`UPSTREAM_PROTOCOL`):
 * - `auto` (default): a node of the edge's own region (EDGE_REGION) over an HTTP/1.1 keep-alive
 *   pool (h1-upstream.ts: the cheaper protocol per request, where opening a connection costs
 *   next to nothing); a node of any other region over ONE multiplexed HTTP/2 session, kept warm
 *   (h2-upstream.ts: a new connection there costs a WAN round trip, and a cancel resets one
 *   stream instead of closing a connection).
 * - `h2`: one HTTP/2 session to every node (the Node entry's only mode before).
 * forward.ts names the node's region on every request (`UpstreamInit.nodeRegion`).
 */
import type { EdgeConfig } from '../config.ts'
import type { UpstreamFetch } from './upstream-fetch.ts'
import { createH1Upstream } from './h1-upstream.ts'
import { createH2Upstream } from './h2-upstream.ts'
import type { EdgeUpstream, UpstreamTls } from './upstream-common.ts'

export interface NodeUpstreamOptions {
  protocol: EdgeConfig['upstreamProtocol']
  /** The edge's own region: its nodes are next door. */
  localRegion: string
  connectTimeoutMs: number
  tls?: UpstreamTls
}

export interface NodeUpstream {
  fetch: UpstreamFetch
  /** Origins with a connection pool or session, open or being opened, either protocol. */
  origins(): string[]
  /** Origins with a connection open now, either protocol. */
  connected(): string[]
  /** Opens a connection to each node that has none (each over the protocol its region takes). */
  warm(nodes: ReadonlyArray<{ url: string; region: string }>): Promise<void>
  close(): Promise<void>
}

export function createNodeUpstream(opts: NodeUpstreamOptions): NodeUpstream {
  const connect = { connectTimeoutMs: opts.connectTimeoutMs, ...(opts.tls ? { tls: opts.tls } : {}) }
  const far = createH2Upstream(connect)
  const near = opts.protocol === 'auto' ? createH1Upstream(connect) : far
  const isNear = (region: string | undefined) => region === opts.localRegion
  const both = (list: (u: EdgeUpstream) => string[]) => [...new Set([...list(near), ...(near === far ? [] : list(far))])]
  return {
    fetch: (url, init) => (isNear(init.nodeRegion) ? near : far).fetch(url, init),
    origins: () => both((u) => u.origins()),
    connected: () => both((u) => u.connected()),
    async warm(nodes) {
      const origins = (nearby: boolean) => nodes.filter((n) => isNear(n.region) === nearby).map((n) => new URL(n.url).origin)
      await Promise.all([near.warm(origins(true)), far.warm(origins(false))])
    },
    async close() {
      await Promise.all([...new Set([near, far])].map((u) => u.close()))
    },
  }
}
