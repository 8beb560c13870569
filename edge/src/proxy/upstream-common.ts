/** What the Node entry's two upstreams (h1-upstream.ts, h2-upstream.ts) share: their shape and the request helpers. */
import type { UpstreamFetch } from './forward.ts'

export interface EdgeUpstream {
  fetch: UpstreamFetch
  /** Origins with a connection pool or session, open or being opened (one per GPU node). */
  origins(): string[]
  /** Origins with a connection open now. */
  connected(): string[]
  /**
   * Opens a connection (with a GET /healthz) to each origin that has none and is not being opened;
   * failures are left to routing (a node that cannot be reached is marked down by the request that
   * tries it). Resolves when every attempt has settled.
   */
  warm(origins: readonly string[]): Promise<void>
  close(): Promise<void>
}

/** Extra TLS options for https nodes (e.g. a private CA in tests). */
export interface UpstreamTls {
  ca?: string | Buffer
  rejectUnauthorized?: boolean
}

export function reasonOf(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason
  return reason instanceof Error ? reason : new Error('request aborted')
}

export function bytesOf(body: RequestInit['body']): Uint8Array | string | undefined {
  if (body === undefined || body === null) return undefined
  if (typeof body === 'string' || body instanceof Uint8Array) return body
  throw new TypeError('the edge upstream sends byte or string bodies only')
}

/** forward.ts passes a plain record of valid lower-case names: taken as is; anything else normalised. */
export function plainHeaders(headers: RequestInit['headers']): Record<string, string> {
  if (headers && !(headers instanceof Headers) && !Array.isArray(headers)) return headers as Record<string, string>
  return Object.fromEntries(new Headers(headers))
}
