import { ApiError } from './api-error.ts'

/**
 * Superseded requests (README "Superseded requests"): a request that names a supersede key ends
 * every older request of its tenant with the same key that is still running, wherever it runs.
 * An editor's completion session is the user: each keystroke's request makes the last one moot.
 */

/** The client's header, forwarded as is from the edge to the node. */
export const SUPERSEDE_HEADER = 'x-zl-supersede'

/** Edge → node: when the edge received the request (epoch ms), which orders a key's requests across nodes. */
export const SUPERSEDE_AT_HEADER = 'x-zl-supersede-at'

/** What a superseded request's error says (409, error code `superseded`). */
export const SUPERSEDED_MESSAGE = `A newer request with the same ${SUPERSEDE_HEADER} key replaced this one.`

const KEY = /^[\x21-\x7e]{1,200}$/

/** The header's key; undefined when absent; a 400 naming the header when it is not 1–200 visible ASCII characters. */
export function parseSupersedeKey(value: string | null | undefined): string | undefined {
  if (value === null || value === undefined) return undefined
  if (!KEY.test(value)) throw new ApiError('invalid_request', `The ${SUPERSEDE_HEADER} header must be 1 to 200 visible ASCII characters.`, { param: SUPERSEDE_HEADER })
  return value
}

export const supersededError = (): ApiError => new ApiError('superseded', SUPERSEDED_MESSAGE)

/** The node route an edge calls to supersede a group's requests another node received earlier (signed like a generate request). */
export const SUPERSEDE_PATH = '/internal/supersede'

/** The body of a supersede notice: the group's key (the tenant is the wire header) and the newer request's edge time. */
export interface SupersedeNotice {
  key: string
  before: number
}

/** A notice body as the node reads it; a 400 for anything else. */
export function parseSupersedeNotice(json: unknown): SupersedeNotice {
  const o = (json ?? {}) as Record<string, unknown>
  const before = o.before
  if (typeof o.key !== 'string' || typeof before !== 'number' || !Number.isFinite(before) || before <= 0) {
    throw new ApiError('invalid_request', 'A supersede notice is {"key": string, "before": epoch ms}.')
  }
  return { key: parseSupersedeKey(o.key)!, before }
}
