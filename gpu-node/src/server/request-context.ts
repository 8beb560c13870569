/**
 * Per-request state shared by the router, the generate route and the request log: ids, wire
 * headers, timing, what happened (for the one log line), and whether the client went away.
 */
import { randomUUID } from 'node:crypto'
import type { Dialect } from '../../../shared/src/dialects/index.ts'
import type { FinishReason } from '../../../shared/src/generation.ts'
import { parseWireHeaders, type WireHeaders } from '../../../shared/src/wire-headers.ts'
import { RequestTimer } from '../metrics/request-timer.ts'
import type { NodeMetrics } from '../metrics/node-metrics.ts'
import type { ServerRequest, ServerResponse } from './http-types.ts'

/** Filled in as the request proceeds; read once by the request log. */
export interface RequestOutcome {
  dialect?: Dialect
  promptTokens?: number
  completionTokens?: number
  finishReason?: FinishReason
  /** ApiError code, or client_aborted. */
  errorCode?: string
}

/** Ids longer than this are replaced: they end up in logs, headers and response ids. */
const MAX_REQUEST_ID_CHARS = 128
const SAFE_REQUEST_ID = /^[\w.:@/+=-]+$/

export class RequestContext {
  readonly path: string
  readonly requestId: string
  /** The x-request-id exactly as received (the edge signs this value), '' when absent. */
  readonly requestIdHeader: string
  readonly wire: WireHeaders
  readonly timer: RequestTimer
  readonly outcome: RequestOutcome = {}
  private gone = false
  private readonly goneListeners: Array<() => void> = []

  constructor(
    readonly req: ServerRequest,
    readonly res: ServerResponse,
    metrics: NodeMetrics | undefined,
  ) {
    this.path = pathnameOf(req.url)
    this.wire = parseWireHeaders((name) => headerValue(req, name))
    this.requestIdHeader = headerValue(req, 'x-request-id') ?? ''
    const id = this.wire.requestId
    this.requestId = id && id.length <= MAX_REQUEST_ID_CHARS && SAFE_REQUEST_ID.test(id) ? id : randomUUID()
    this.timer = new RequestTimer(metrics)
    // 'close' before the response was ended means the client (or its stream) went away.
    res.on('close', () => {
      if (res.writableEnded || this.gone) return
      this.gone = true
      for (const fn of this.goneListeners.splice(0)) fn()
    })
  }

  get clientGone(): boolean {
    return this.gone
  }

  /** Runs `fn` once when the client goes away before the response ends (at once if it already has). */
  onClientGone(fn: () => void): void {
    if (this.gone) fn()
    else this.goneListeners.push(fn)
  }
}

export function headerValue(req: ServerRequest, name: string): string | undefined {
  const v = req.headers[name]
  return Array.isArray(v) ? v[0] : v
}

function pathnameOf(url: string | undefined): string {
  const raw = url ?? '/'
  const q = raw.indexOf('?')
  return q < 0 ? raw : raw.slice(0, q)
}
