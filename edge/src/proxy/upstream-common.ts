/** What the Node entry's two upstreams (h1-upstream.ts, h2-upstream.ts) share: their shape and the request helpers. */
import type { ClientSignal, UpstreamFetch, UpstreamResponse } from './upstream-fetch.ts'

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

/** forward.ts hands over a URL's href: split into origin and path, not parsed again. */
export function splitHref(href: string): [origin: string, path: string] {
  const pathAt = href.indexOf('/', href.indexOf('//') + 2)
  return pathAt < 0 ? [href, '/'] : [href.slice(0, pathAt), href.slice(pathAt)]
}

/**
 * An upstream's `warm`: a GET /healthz (`healthz`, its answer read and dropped) to each origin with
 * no open connection (`isOpen`), at most one in flight per origin; failures are left to routing.
 */
export function healthzWarmer(isOpen: (origin: string) => boolean, healthz: (origin: string) => Promise<UpstreamResponse>): EdgeUpstream['warm'] {
  const warming = new Map<string, Promise<void>>()
  const warmOne = (origin: string): Promise<void> => {
    const attempt = healthz(origin)
      .then((res) => res.arrayBuffer())
      .then(
        () => {},
        () => {},
      )
      .finally(() => warming.delete(origin))
    warming.set(origin, attempt)
    return attempt
  }
  return async (origins) => {
    const attempts: Promise<void>[] = []
    for (const origin of new Set(origins)) if (!isOpen(origin)) attempts.push(warming.get(origin) ?? warmOne(origin))
    await Promise.all(attempts)
  }
}

export function reasonOf(signal: ClientSignal | undefined): Error {
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
