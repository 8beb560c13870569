/**
 * POST SUPERSEDE_PATH: an edge tells this node that a newer request of a supersede group runs on
 * another node (edge/src/routing/supersede-ledger.ts), so this node's requests of the group that
 * the edge received before it end as superseded. Signed as a generate request; the tenant is the
 * wire header's only when the signature was verified (unsigned direct use shares one namespace).
 */
import { parseJsonBody } from '../../../shared/src/json-body.ts'
import { parseSupersedeNotice } from '../../../shared/src/supersede.ts'
import type { SignatureCheck } from './edge-signature.ts'
import { readBody } from './read-body.ts'
import type { RequestContext } from './request-context.ts'
import { sendJson } from './respond.ts'
import type { Supersessions } from './supersessions.ts'

/** A notice is a key and a time: far below any generate body. */
const MAX_NOTICE_BYTES = 4096

export async function handleSupersedeNotice(ctx: RequestContext, deps: { checkSignature: SignatureCheck; supersessions: Supersessions }): Promise<void> {
  const body = await readBody(ctx.req, MAX_NOTICE_BYTES)
  const signed = await deps.checkSignature({ method: ctx.req.method ?? 'POST', path: ctx.path, requestId: ctx.requestIdHeader, signatureHeader: ctx.wire.signature, body })
  const notice = parseSupersedeNotice(parseJsonBody(body))
  const superseded = deps.supersessions.supersede(signed && ctx.wire.tenant ? ctx.wire.tenant : '', notice.key, notice.before)
  sendJson(ctx.req, ctx.res, 200, { superseded }, { 'x-request-id': ctx.requestId })
}
