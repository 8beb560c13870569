/**
 * The Node entry's "client gone" signal for a generate request, read off the Node response
 * itself instead of `c.req.raw.signal`.
 *
 * Why: @hono/node-server makes that signal on first read, a full AbortController per request
 * (Node's EventTarget machinery: `createAbortSignal` was ~2 % of the edge's busy CPU in the
 * profile, and the upstream's add/removeEventListener on it another ~1 %). This one is a
 * plain object and one 'close' listener on the response, and it aborts by the adapter's own rule
 * (its listener's close handler): the client's connection closed before the response finished,
 * or the request stream errored or, over HTTP/2, was aborted.
 */
import type { ClientSignal } from '../proxy/upstream-fetch.ts'

/** The slice of Node's HTTP/1.1 and HTTP/2 ServerResponse this reads. */
export interface ClosingResponse {
  readonly writableFinished?: boolean
  /** HTTP/1.1 (ServerResponse); an HTTP/2 response has its stream's instead. */
  readonly destroyed?: boolean
  readonly stream?: { readonly destroyed: boolean }
  once(event: 'close', listener: () => void): unknown
}

/** The slice of Node's HTTP/1.1 and HTTP/2 request this reads. */
export interface ClosingRequest {
  readonly errored?: unknown
  /** HTTP/2 only (Http2ServerRequest): the stream was reset. */
  readonly aborted?: boolean
}

export class ClientCloseSignal implements ClientSignal {
  aborted = false
  reason: unknown = undefined
  private listeners: (() => void)[] = []

  constructor(outgoing: ClosingResponse, incoming: ClosingRequest) {
    const gone = () => !outgoing.writableFinished || incoming.errored != null || incoming.aborted === true
    // Closed already (the client left while the body was read): 'close' will not come again.
    if ((outgoing.destroyed ?? outgoing.stream?.destroyed) && gone()) this.abort()
    else outgoing.once('close', () => gone() && this.abort())
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    this.listeners.push(listener)
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const at = this.listeners.indexOf(listener)
    if (at >= 0) this.listeners.splice(at, 1)
  }

  private abort(): void {
    if (this.aborted) return
    this.aborted = true
    this.reason = new Error('the client closed the connection')
    // Each listener once, as `{ once: true }` asks (the only way the edge listens).
    const listeners = this.listeners
    this.listeners = []
    for (const listener of listeners) listener()
  }
}
