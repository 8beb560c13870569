/**
 * How the edge reaches a node: fetch's shape, narrowed to what forward reads, plus the time a node
 * has to send its response headers. The Workers entry wraps the global fetch (withHeadersTimeout);
 * the Node entry's upstreams implement it themselves (h1-upstream.ts, h2-upstream.ts).
 */
import type { UpstreamBody } from './pass-through.ts'

/**
 * What forward reads of a node's answer. fetch's Response has it; the Node entry's upstreams
 * hand over a lighter object that builds a web stream only if one is asked for, and can push a
 * streamed body straight into the Node server's response (pass-through.ts).
 */
export interface UpstreamResponse extends UpstreamBody {
  readonly status: number
  readonly headers: UpstreamHeaders
  arrayBuffer(): Promise<ArrayBuffer>
}

/**
 * What forward reads of a node's response headers (lower-case names): fetch's Headers has it;
 * the Node entry's upstreams wrap node:http2's header object or undici's raw list instead of
 * building a Headers, which validates every entry and sorts them to iterate — only the client's
 * headers need that (`responseHeaders`).
 */
export interface UpstreamHeaders {
  get(name: string): string | null
  forEach(fn: (value: string, name: string) => void): void
}

/**
 * fetch's shape (the Workers global through `withHeadersTimeout`, or the Node entry's own upstream:
 * HTTP/1.1 to its region's nodes, one HTTP/2 connection to each other node, node-upstream.ts),
 * plus the time the node has to send its response headers: past it the promise rejects with
 * UpstreamTimeout and the request is aborted.
 * `init.signal` is the client's, for the whole exchange, headers and body.
 */
export type UpstreamFetch = (url: string, init: UpstreamInit) => Promise<UpstreamResponse>
export interface UpstreamInit extends Omit<RequestInit, 'signal'> {
  signal?: ClientSignal
  headersTimeoutMs?: number
  /** The node's region: the Node entry reaches its own region's nodes over HTTP/1.1 (node-upstream.ts). */
  nodeRegion?: string
}

/**
 * What the edge reads of the client's signal: an AbortSignal has it (the Workers entry passes the
 * request's own); the Node entry passes a lighter one read off its response (entries/client-signal.ts).
 */
export interface ClientSignal {
  readonly aborted: boolean
  readonly reason: unknown
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

/** No response headers within `headersTimeoutMs`: the node is connected but too slow to answer. */
export class UpstreamTimeout extends Error {
  override readonly name = 'UpstreamTimeout'
  constructor() {
    super('upstream timeout')
  }
}

/**
 * An UpstreamFetch over a plain fetch (the Workers entry): the headers timeout as an abort of
 * its own beside the caller's signal. The Node entry's upstreams time the request themselves,
 * without a controller per request (h1-upstream.ts, h2-upstream.ts).
 */
export function withHeadersTimeout(fetchLike: (url: string, init: RequestInit) => Promise<UpstreamResponse>): UpstreamFetch {
  // `nodeRegion` is the Node entry's routing hint, not a fetch option: it stays here.
  return async (url, { headersTimeoutMs, nodeRegion: _region, signal: client, ...init }) => {
    if (headersTimeoutMs === undefined && !client) return fetchLike(url, init)
    const controller = new AbortController()
    const onClientAbort = () => controller.abort(client?.reason)
    if (client?.aborted) onClientAbort()
    else client?.addEventListener('abort', onClientAbort, { once: true })
    let timedOut = false
    const timer = headersTimeoutMs === undefined ? undefined : setTimeout(() => {
      timedOut = true
      controller.abort(new UpstreamTimeout())
    }, headersTimeoutMs)
    try {
      const res = await fetchLike(url, { ...init, signal: controller.signal })
      // The client's abort still ends the body: the listener stays until the body is done or gone.
      return res
    } catch (e) {
      client?.removeEventListener('abort', onClientAbort)
      throw timedOut ? new UpstreamTimeout() : e
    } finally {
      clearTimeout(timer)
    }
  }
}
