/**
 * The Node entry's upstream to the GPU nodes of its OWN region: undici's HTTP/1.1 pool, one per
 * node origin, keep-alive connections reused request after request (h2-upstream.ts reaches the
 * other regions' nodes; node-upstream.ts picks between the two by the node's region).
 *
 * Why not HTTP/2 here too: next door, a connection costs a fraction of a millisecond to open and
 * what matters is each request's CPU. Counted under callgrind per 1 kB request and its answer
 * (bench/rig/upstream-cost.ts, docs/PERFORMANCE.md *The edge's upstream*): undici's HTTP/1.1
 * pool ~74–84 k instructions, node:http2 bare 244–286 k, about a sixth of the edge's whole
 * request. HTTP/2's gains — one warm connection carrying every stream, a cancel that resets one
 * stream instead of closing a connection — pay off across a WAN, where a new connection costs a
 * round trip; reverse proxies (nginx, Envoy) talk HTTP/1.1 to their neighbours for the same reason.
 * The node accepts both on one port (DESIGN.md §7); the Workers entry's local fetch uses HTTP/1.1.
 *
 * Same contract to forward.ts as the h2 upstream: backpressure (a full body pauses the socket
 * until the client reads), the client's signal or a cancelled body aborts the request (undici
 * destroys its connection, which the node reads as the client gone and stops generating), a
 * failure after the headers errors the body, the headers timeout as one timer. Token streams are
 * long and gappy: no body timeout (the client's disconnect owns the body's time). Idle connections
 * close when the node's keep-alive hint says so; `warm` opens one ahead of need.
 */
import { Pool } from 'undici'
import { UpstreamTimeout, type UpstreamFetch, type UpstreamHeaders, type UpstreamInit, type UpstreamResponse } from './upstream-fetch.ts'
import { bytesOf, healthzWarmer, plainHeaders, reasonOf, splitHref, type EdgeUpstream, type UpstreamTls } from './upstream-common.ts'
import { UpstreamAnswer } from './upstream-answer.ts'

/** Concurrent requests (so connections) per node; more wait in the pool for a free one. */
export const MAX_CONNECTIONS_PER_NODE = 128
/** The longest an idle connection is kept, whatever the node's keep-alive hint says. */
const KEEP_ALIVE_MAX_MS = 60_000

export interface H1UpstreamOptions {
  connectTimeoutMs: number
  tls?: UpstreamTls
}

export function createH1Upstream(opts: H1UpstreamOptions): EdgeUpstream {
  const pools = new Map<string, Pool>()
  const poolFor = (origin: string): Pool => {
    let pool = pools.get(origin)
    if (!pool) {
      pool = new Pool(origin, {
        connections: MAX_CONNECTIONS_PER_NODE,
        pipelining: 1,
        connectTimeout: opts.connectTimeoutMs,
        headersTimeout: 0,
        bodyTimeout: 0,
        keepAliveMaxTimeout: KEEP_ALIVE_MAX_MS,
        ...(opts.tls ? { connect: opts.tls } : {}),
      })
      pools.set(origin, pool)
    }
    return pool
  }
  const isConnected = (origin: string) => (pools.get(origin)?.stats.connected ?? 0) > 0

  return {
    fetch(url, init) {
      const [origin, path] = splitHref(url)
      return h1Fetch(poolFor(origin), origin, path, init)
    },
    origins: () => [...pools.keys()],
    connected: () => [...pools.keys()].filter(isConnected),
    warm: healthzWarmer(isConnected, (origin) => h1Fetch(poolFor(origin), origin, '/healthz', { method: 'GET', headersTimeoutMs: opts.connectTimeoutMs * 2 })),
    async close() {
      const closing = [...pools.values()].map((p) => p.close())
      pools.clear()
      await Promise.all(closing)
    },
  }
}

/**
 * One request through undici's dispatcher API: its `request()` would wrap the answer in an
 * AsyncResource and a Node Readable; the handler here feeds an UpstreamAnswer directly.
 */
function h1Fetch(pool: Pool, origin: string, path: string, init: UpstreamInit): Promise<UpstreamResponse> {
  return new Promise<UpstreamResponse>((resolve, reject) => {
    const signal = init.signal ?? undefined
    if (signal?.aborted) return reject(reasonOf(signal))
    /** undici's abort for this request, once it has a connection (onConnect). */
    let abortRequest: ((reason: Error) => void) | undefined
    /** Why the edge ended the request before undici handed its abort over. */
    let endedWith: Error | undefined
    let answer: UpstreamAnswer | undefined
    let ended = false
    const cut = (reason: Error) => {
      if (abortRequest) abortRequest(reason)
      else endedWith ??= reason
    }
    const onAbort = () => cut(reasonOf(signal))
    signal?.addEventListener('abort', onAbort, { once: true })
    const timer =
      init.headersTimeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            const timeout = new UpstreamTimeout()
            finish(() => reject(timeout))
            cut(timeout)
          }, init.headersTimeoutMs)
    const finish = (then: () => void) => {
      signal?.removeEventListener('abort', onAbort)
      clearTimeout(timer)
      if (ended) return
      ended = true
      then()
    }
    const body = bytesOf(init.body)
    pool.dispatch(
      { origin, path, method: (init.method ?? 'GET') as 'POST', headers: plainHeaders(init.headers), body },
      {
        onConnect(abort: (reason: Error) => void) {
          if (endedWith) return abort(endedWith)
          abortRequest = abort
        },
        onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void) {
          // 1xx (100-continue): the final answer follows.
          if (statusCode < 200) return true
          clearTimeout(timer)
          answer = new UpstreamAnswer(statusCode, new RawHeaders(rawHeaders), resume, () => cut(new Error('response body cancelled')))
          resolve(answer)
          return true
        },
        onData(chunk: Buffer) {
          // undici's parser, resumed, can hand over an empty chunk first; passed on, it filled a
          // web stream's queue with empty chunks that paused the socket again before any read.
          return ended || !answer || chunk.byteLength === 0 ? true : answer.take(chunk)
        },
        onComplete() {
          finish(() => answer?.complete())
        },
        onError(err: Error) {
          finish(() => (answer ? answer.fail(err) : reject(err)))
        },
      },
    )
  })
}

/** undici's raw header list (name, value, name, value… as bytes) as forward.ts reads it, names lower-cased. */
class RawHeaders implements UpstreamHeaders {
  private readonly names: string[] = []
  private readonly values: string[] = []

  constructor(raw: Buffer[]) {
    for (let i = 0; i + 1 < raw.length; i += 2) {
      this.names.push(raw[i]!.toString('latin1').toLowerCase())
      this.values.push(raw[i + 1]!.toString('latin1'))
    }
  }

  get(name: string): string | null {
    let found: string | null = null
    for (let i = 0; i < this.names.length; i++) if (this.names[i] === name) found = found === null ? this.values[i]! : `${found}, ${this.values[i]}`
    return found
  }

  forEach(fn: (value: string, name: string) => void): void {
    for (let i = 0; i < this.names.length; i++) fn(this.values[i]!, this.names[i]!)
  }
}
