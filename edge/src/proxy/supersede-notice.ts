/**
 * Tells a GPU node to supersede its requests of a group that the edge received before `before`
 * (routing/supersede-ledger.ts decides which node): a small POST to the node's SUPERSEDE_PATH,
 * signed as a generate request is (DESIGN.md §4), the tenant in its wire header. Best effort, in
 * the background: a node that is gone has nothing left to supersede.
 */
import { andThen } from '../../../shared/src/maybe-promise.ts'
import { signRequest } from '../../../shared/src/signature.ts'
import { SUPERSEDE_PATH, type SupersedeNotice } from '../../../shared/src/supersede.ts'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import type { RoutableNode } from '../routing/pick-node.ts'
import type { ForwardDeps } from './forward-request.ts'
import { targetUrl } from './target-url.ts'

const encoder = new TextEncoder()

export async function sendSupersedeNotice(node: RoutableNode, tenant: string, requestId: string, notice: SupersedeNotice, deps: Pick<ForwardDeps, 'upstream' | 'secret' | 'digest' | 'now' | 'connectTimeoutMs'>): Promise<void> {
  const target = targetUrl(node.url, SUPERSEDE_PATH)
  const body = encoder.encode(JSON.stringify(notice))
  const headers = await andThen(signRequest({ secret: deps.secret, method: 'POST', path: target.pathname, requestId, body, nowMs: deps.now(), extra: '' }, deps.digest), (sig) => ({
    'content-type': 'application/json',
    [WIRE_HEADERS.requestId]: requestId,
    [WIRE_HEADERS.tenant]: tenant,
    [WIRE_HEADERS.signature]: sig,
  }))
  const res = await deps.upstream(target.href, { method: 'POST', headers, body, redirect: 'manual', headersTimeoutMs: deps.connectTimeoutMs, nodeRegion: node.region })
  await res.arrayBuffer()
}
