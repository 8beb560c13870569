/**
 * How a request ended, one stable snake_case label (the metric label, the log field, the Redis
 * field name). Decided from the status the client got and how the body ended, so edge refusals
 * and node answers are labelled alike.
 */

export const REQUEST_OUTCOMES = [
  'ok',
  'client_aborted',
  'bad_request',
  'auth_failed',
  'rate_limited',
  'overloaded',
  'upstream_unavailable',
  'upstream_error',
  'timeout',
  'internal',
] as const
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number]

/**
 * The outcomes that count as errors in error rates: the service failed the request. Refusals
 * of the client's own making (bad input, bad key, over its limits) and clients that left are not.
 */
export const ERROR_OUTCOMES: ReadonlySet<RequestOutcome> = new Set(['overloaded', 'upstream_unavailable', 'upstream_error', 'timeout', 'internal'])

/** How the response body ended (proxy/pass-through.ts; an edge-made body always completes). */
export type BodyEnd = 'complete' | 'upstream_error' | 'client_gone'

/** nginx's "client closed request": what the edge answers when the client left before the node did. */
export const CLIENT_CLOSED_STATUS = 499

/**
 * `fromNode`: the status is the node's own answer (a node 500 is an upstream error, an edge 500
 * an internal one).
 */
export function toOutcome(status: number, body: BodyEnd, fromNode: boolean): RequestOutcome {
  if (body === 'client_gone' || status === CLIENT_CLOSED_STATUS) return 'client_aborted'
  if (body === 'upstream_error') return 'upstream_error'
  if (status < 400) return 'ok'
  switch (status) {
    case 401:
    case 403:
      return 'auth_failed'
    case 429:
      return 'rate_limited'
    case 502:
      return 'upstream_unavailable'
    case 503:
    case 529:
      return 'overloaded'
    case 408:
    case 504:
      return 'timeout'
  }
  if (status < 500) return 'bad_request'
  return fromNode ? 'upstream_error' : 'internal'
}

export function isError(outcome: RequestOutcome): boolean {
  return ERROR_OUTCOMES.has(outcome)
}

export function isRequestOutcome(s: string): s is RequestOutcome {
  return (REQUEST_OUTCOMES as readonly string[]).includes(s)
}
