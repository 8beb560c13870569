/**
 * The node's side of DESIGN.md §4: only the edge (holding EDGE_SHARED_SECRET) may call the
 * generate routes. The check is built once at boot from config; with ALLOW_UNSIGNED it is a
 * no-op (local direct use only, warned about once at start by main). The node is Node only:
 * node:crypto hashes and verifies synchronously (shared/src/node-digest.ts), with no Web Crypto
 * thread-pool job per request.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import { nodeDigest } from '../../../shared/src/node-digest.ts'
import { verifySignature } from '../../../shared/src/signature.ts'

export interface SignedRequest {
  method: string
  /** URL pathname, no query: what the edge signed. */
  path: string
  /** The x-request-id header as received ('' when absent: the edge always sends one). */
  requestId: string
  signatureHeader: string | undefined
  body: Uint8Array
  /** The signed resume headers (resume-wire.ts resumeSignedExtra), '' for an ordinary request. */
  extra?: string
}

/**
 * Resolves when the request may proceed: true when it was verified as the edge's (so the tenant
 * it names is one the edge vouches for), false under ALLOW_UNSIGNED; rejects with
 * ApiError('unauthorized').
 */
export type SignatureCheck = (req: SignedRequest) => Promise<boolean>

const MESSAGES: Record<'missing' | 'malformed' | 'expired' | 'mismatch', string> = {
  missing: 'Missing request signature.',
  malformed: 'Malformed request signature.',
  expired: 'Request signature expired: the signing clock is more than 30 s away from this node.',
  mismatch: 'Invalid request signature.',
}

export function createSignatureCheck(opts: { secret?: string; allowUnsigned: boolean; now?: () => number }): SignatureCheck {
  const { secret } = opts
  if (opts.allowUnsigned || secret === undefined) return async () => false
  const now = opts.now ?? Date.now
  return async (req) => {
    const result = await verifySignature({
      secret,
      header: req.signatureHeader,
      method: req.method,
      path: req.path,
      requestId: req.requestId,
      body: req.body,
      nowMs: now(),
      extra: req.extra ?? '',
    }, nodeDigest)
    if (!result.ok) throw new ApiError('unauthorized', MESSAGES[result.reason])
    return true
  }
}
