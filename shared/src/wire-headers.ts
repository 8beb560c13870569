/**
 * The edge → GPU node header contract (DESIGN.md §4), plus the three the edge adds to its own
 * response. The node trusts these only after verifying `x-zl-signature` (signature.ts).
 */

export const WIRE_HEADERS = {
  requestId: 'x-request-id',
  traceparent: 'traceparent',
  tenant: 'x-zl-tenant',
  keyId: 'x-zl-key-id',
  /** Absolute epoch ms after which the node may drop the request. */
  deadlineMs: 'x-zl-deadline-ms',
  /** Integer, lower runs first. */
  priority: 'x-zl-priority',
  /** Edge location (colo or EDGE_REGION). */
  edge: 'x-zl-edge',
  signature: 'x-zl-signature',
  /** Response header: the region of the node that answered. */
  region: 'x-zl-region',
  /** Response header: how many upstream attempts failed before the one that answered. */
  failover: 'x-zl-failover',
  /** Response header: how cache-affine routing placed the request (hit | spread | moved | none). */
  affinity: 'x-zl-affinity',
} as const

export interface WireHeaders {
  requestId?: string
  traceparent?: string
  tenant?: string
  keyId?: string
  /** Epoch ms; undefined when absent or not a positive number. */
  deadlineMs?: number
  /** Lower runs first; 0 when absent or not an integer. */
  priority: number
  edge?: string
  signature?: string
}

/** Reads the request-side wire headers through any header getter (Headers.get, a Node adapter). */
export function parseWireHeaders(get: (name: string) => string | null | undefined): WireHeaders {
  const text = (name: string): string | undefined => {
    const v = get(name)?.trim()
    return v ? v : undefined
  }
  const headers: WireHeaders = { priority: parsePriority(text(WIRE_HEADERS.priority)) }
  assignIfSet(headers, 'requestId', text(WIRE_HEADERS.requestId))
  assignIfSet(headers, 'traceparent', text(WIRE_HEADERS.traceparent))
  assignIfSet(headers, 'tenant', text(WIRE_HEADERS.tenant))
  assignIfSet(headers, 'keyId', text(WIRE_HEADERS.keyId))
  assignIfSet(headers, 'deadlineMs', parseDeadline(text(WIRE_HEADERS.deadlineMs)))
  assignIfSet(headers, 'edge', text(WIRE_HEADERS.edge))
  assignIfSet(headers, 'signature', text(WIRE_HEADERS.signature))
  return headers
}

function parsePriority(v: string | undefined): number {
  if (v === undefined || !/^-?\d{1,9}$/.test(v)) return 0
  return Number(v)
}

function parseDeadline(v: string | undefined): number | undefined {
  if (v === undefined || !/^\d+(\.\d+)?$/.test(v)) return undefined
  const n = Number(v)
  return Number.isFinite(n) && n > 0 ? n : undefined
}

/** Keeps absent headers absent (not `key: undefined`), so results compare cleanly. */
function assignIfSet<K extends keyof WireHeaders>(target: WireHeaders, key: K, value: WireHeaders[K] | undefined): void {
  if (value !== undefined) target[key] = value
}
