/**
 * The official SDKs (unmodified) and raw fetch, pointed at a test stack's edge. `geo` places the
 * client with `x-zl-client-geo` (honoured because the local stack sets DEV_MODE=1).
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'

export interface ClientOptions {
  apiKey: string
  /** `lat,lon` sent as x-zl-client-geo. */
  geo?: string
  /** Default 0: a test sees the first answer, not the SDK's retry of it. */
  maxRetries?: number
  /** The SDK's `fetch` option (e.g. a recorder); the SDK itself stays unmodified. */
  fetch?: typeof fetch
}

export function openaiClient(edgeUrl: string, o: ClientOptions): OpenAI {
  return new OpenAI({
    apiKey: o.apiKey,
    baseURL: `${edgeUrl}/v1`,
    maxRetries: o.maxRetries ?? 0,
    ...(o.geo ? { defaultHeaders: { 'x-zl-client-geo': o.geo } } : {}),
    ...(o.fetch ? { fetch: o.fetch } : {}),
  })
}

export function anthropicClient(edgeUrl: string, o: ClientOptions): Anthropic {
  return new Anthropic({
    apiKey: o.apiKey,
    baseURL: edgeUrl,
    maxRetries: o.maxRetries ?? 0,
    ...(o.geo ? { defaultHeaders: { 'x-zl-client-geo': o.geo } } : {}),
    ...(o.fetch ? { fetch: o.fetch } : {}),
  })
}

export interface RawOptions {
  apiKey: string
  geo?: string
  signal?: AbortSignal
  headers?: Record<string, string>
}

/** POST a JSON body (or exact bytes/text) to the edge with the key as a Bearer token. */
export function edgePost(edgeUrl: string, path: string, body: unknown, o: RawOptions): Promise<Response> {
  return fetch(`${edgeUrl}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${o.apiKey}`,
      'content-type': 'application/json',
      ...(o.geo ? { 'x-zl-client-geo': o.geo } : {}),
      ...o.headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...(o.signal ? { signal: o.signal } : {}),
  })
}

export interface Attempt {
  startMs: number
  /** When the response headers arrived. */
  endMs: number
  status: number
  retryAfterMs: number | undefined
}

/** A fetch for the SDKs' `fetch` option that records each HTTP attempt the SDK makes. */
export function recordingFetch(attempts: Attempt[]): typeof fetch {
  return async (input, init) => {
    const startMs = performance.now()
    const res = await fetch(input, init)
    const header = res.headers.get('retry-after-ms')
    attempts.push({ startMs, endMs: performance.now(), status: res.status, retryAfterMs: header === null ? undefined : Number(header) })
    return res
  }
}

/** The rejection of `p` (fails the test if `p` resolves). */
export async function rejectionOf(p: Promise<unknown>): Promise<unknown> {
  try {
    await p
  } catch (e) {
    return e
  }
  throw new Error('expected the call to fail, but it succeeded')
}

/** `server-timing: edge;dur=A, upstream;dur=B` → { edge: A, upstream: B }. */
export function serverTiming(headers: Headers): { edge: number; upstream: number } {
  const value = headers.get('server-timing') ?? ''
  const m = /edge;dur=(\d+(?:\.\d+)?),\s*upstream;dur=(\d+(?:\.\d+)?)/.exec(value)
  if (!m) throw new Error(`no edge/upstream server-timing in ${JSON.stringify(value)}`)
  return { edge: Number(m[1]), upstream: Number(m[2]) }
}
