/**
 * The generate handler (after auth, limits and validation): rank nodes for the model and the
 * client's location, forward, and answer with the node's response. A request refused after its
 * token charge (no node, or the node's own 4xx/5xx) gets the charge back before the answer goes
 * out, so the client's next request already sees it.
 */
import type { Context } from 'hono'
import { ApiError } from '../../../shared/src/api-error.ts'
import { formatTraceparent } from '../../../shared/src/trace-context.ts'
import type { AppEnv, EdgeDeps } from '../app-env.ts'
import { CLIENT_CLOSED_STATUS } from '../latency/outcome.ts'
import { refundCharge } from '../middleware/rate-limit.ts'
import { forward, ClientGone, type ForwardResult } from '../proxy/forward.ts'
import { clientLocation, edgeColo } from '../routing/client-location.ts'
import { pickNodes } from '../routing/pick-node.ts'

export function generate(deps: EdgeDeps, now: () => number) {
  return async (c: Context<AppEnv>): Promise<Response> => {
    const { codec, gen, body } = c.get('generate')
    const principal = c.get('principal')
    const table = await deps.registry.table(c.get('waitUntil'))
    const ranked = pickNodes(table.nodes, gen.model, clientLocation(c.req.raw, deps.config), now())
    const edge = edgeColo(c.req.raw) ?? deps.config.edgeRegion

    let result: ForwardResult
    try {
      if (ranked.length === 0) throw new ApiError('upstream_unavailable', 'No GPU node serving this model is available right now; please retry.', { retryAfterMs: 1000 })
      result = await forward(ranked, {
        path: codec.path,
        body,
        stream: gen.stream,
        codec,
        requestId: c.get('requestId'),
        traceparent: formatTraceparent(c.get('trace')),
        tenant: principal.tenant,
        keyId: principal.keyId,
        priority: 0,
        edge,
        signal: c.req.raw.signal,
        startedAtMs: c.get('startedAtMs'),
      }, {
        upstream: deps.upstream,
        secret: deps.config.edgeSharedSecret,
        digest: deps.digest,
        connectTimeoutMs: deps.config.upstreamConnectTimeoutMs,
        requestTimeoutMs: deps.config.requestTimeoutMs,
        markDown: (id) => deps.registry.markDown(id),
        now,
      })
    } catch (e) {
      await refundCharge(c, deps.limiter)
      if (e instanceof ClientGone) return new Response(null, { status: CLIENT_CLOSED_STATUS })
      throw e
    }
    if (result.response.status >= 400) await refundCharge(c, deps.limiter)

    // latency/observe-request.ts records and logs the request once this body ends.
    c.set('forwarded', { nodeRegion: result.node.region, failovers: result.failedAttempts, finished: result.finished })
    return result.response
  }
}
