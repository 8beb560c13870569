/**
 * The Node entry's transport for @upstash/redis: a `Requester` (`new Redis(requester)`) that
 * speaks the Upstash REST protocol over an undici `Pool` with keep-alive, instead of the
 * library's `HttpClient` on the global `fetch` — which in Node builds a Request, a Response,
 * web streams and (for our per-call timeout) an `AbortSignal.timeout` for every command, the
 * largest CPU cost of a request on the Node edge. Workers keep the library's own client.
 *
 * It mirrors HttpClient.request of @upstash/redis 1.39 (chunk-*.mjs) for what the edge uses:
 * POST `[url, ...path].join('/')` with the JSON command(s) as body and `authorization: Bearer`;
 * the JSON answer as is (`{ result } | { error }`, or an array of them for /pipeline and
 * /multi-exec); the `upstash-sync-token` round trip of readYourWrites. Differences, on purpose:
 * - plain JSON answers (the library's `responseEncoding: false`): no base64 decoding, our
 *   values are ASCII/JSON;
 * - a non-2xx answer rejects with the server's `error` text ONLY — the library appends the
 *   command, and commands carry key hashes and prompts, which must never reach a log;
 * - no retries (the edge's failure policy decides at once), no telemetry headers, no streaming
 *   (SUBSCRIBE/monitor): such a request is refused;
 * - every call is bounded by `timeoutMs` (one timer per call, which aborts the undici request):
 *   the caller sees an error within that time, whatever hangs — connect, headers or body.
 */
import { errors, type Requester, type UpstashRequest, type UpstashResponse } from '@upstash/redis'
import { Pool } from 'undici'

const { UpstashError } = errors

export interface UndiciRedisRequesterOptions {
  /** UPSTASH_REDIS_REST_URL (http or https, optionally with a base path). */
  url: string
  /** UPSTASH_REDIS_REST_TOKEN. */
  token: string
  /** Longest a call may take, from the call to the parsed answer. */
  timeoutMs: number
  /** A pool to the same origin shared with other requesters (its owner closes it); default: one of its own. */
  pool?: Pool
  /** Read-your-writes sync token round trip (@upstash/redis' default: on). */
  readYourWrites?: boolean
}

/** Raised when a call got no complete answer within `timeoutMs`. */
export class UpstashTimeoutError extends Error {
  override readonly name = 'UpstashTimeoutError'
  constructor(timeoutMs: number) {
    super(`Upstash REST call timed out after ${timeoutMs} ms`)
  }
}

/** A keep-alive pool to the Upstash REST origin, for one or more requesters. */
export function createUpstashPool(url: string, options: Pool.Options = {}): Pool {
  return new Pool(new URL(url).origin, {
    // As many connections as concurrent calls (the global fetch's Agent does the same); idle
    // ones stay open for reuse (undici follows the server's keep-alive hint when it sends one).
    connections: null,
    keepAliveTimeout: 30_000,
    connectTimeout: 10_000,
    ...options,
  })
}

export class UndiciRedisRequester implements Requester {
  readYourWrites: boolean
  upstashSyncToken = ''
  readonly timeoutMs: number
  private readonly pool: Pool
  private readonly ownsPool: boolean
  private readonly basePath: string
  private readonly authorization: string

  constructor(opts: UndiciRedisRequesterOptions) {
    const url = new URL(opts.url)
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('The Upstash REST URL must be http(s)')
    if (!(opts.timeoutMs > 0)) throw new Error('timeoutMs must be positive')
    this.basePath = url.pathname.replace(/\/+$/, '')
    this.authorization = `Bearer ${opts.token}`
    this.timeoutMs = opts.timeoutMs
    this.readYourWrites = opts.readYourWrites ?? true
    this.ownsPool = !opts.pool
    this.pool = opts.pool ?? createUpstashPool(opts.url)
  }

  /** @upstash/redis calls this when a client (or @upstash/ratelimit) adds telemetry: none is sent. */
  mergeTelemetry(): void {}

  async request<TResult = unknown>(req: UpstashRequest): Promise<UpstashResponse<TResult>> {
    if (req.isStreaming || req.onMessage) throw new Error('Streaming Upstash requests are not supported by this transport')
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      ...req.headers,
      authorization: this.authorization,
    }
    if (this.readYourWrites && this.upstashSyncToken) headers['upstash-sync-token'] = this.upstashSyncToken
    const path = req.path && req.path.length > 0 ? `${this.basePath}/${req.path.join('/')}` : this.basePath || '/'

    const controller = new AbortController()
    const timer = setTimeout(abortOnTimeout, this.timeoutMs, controller, this.timeoutMs)
    const onCallerAbort = () => controller.abort(req.signal?.reason ?? new Error('Upstash REST call aborted'))
    req.signal?.addEventListener('abort', onCallerAbort, { once: true })
    let status: number
    let text: string
    let syncToken: string | string[] | undefined
    try {
      const res = await this.pool.request({ method: 'POST', path, headers, body: JSON.stringify(req.body), signal: controller.signal })
      status = res.statusCode
      syncToken = res.headers['upstash-sync-token']
      text = await res.body.text()
    } catch (e) {
      // undici rejects with the abort reason; anything else is a transport error (no command in it).
      if (controller.signal.aborted) throw controller.signal.reason
      throw e
    } finally {
      clearTimeout(timer)
      req.signal?.removeEventListener('abort', onCallerAbort)
    }

    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      // Not the body itself: an answer may echo values.
      throw new UpstashError(`Unparseable Upstash REST answer (status ${status})`)
    }
    if (status < 200 || status >= 300) {
      const error = (body as { error?: unknown } | null)?.error
      throw new UpstashError(typeof error === 'string' ? error : `Upstash REST answered ${status}`)
    }
    if (this.readYourWrites) this.upstashSyncToken = (Array.isArray(syncToken) ? syncToken[0] : syncToken) ?? ''
    return body as UpstashResponse<TResult>
  }

  /** Closes the pool if this requester created it (a shared pool is closed by its owner). */
  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.close()
  }
}

function abortOnTimeout(controller: AbortController, timeoutMs: number): void {
  controller.abort(new UpstashTimeoutError(timeoutMs))
}
