/**
 * The generate handler (after auth, limits and validation): rank nodes for the model and the
 * client's location, place the request by its affinity key (routing/affinity-route.ts: where its
 * prefix is likely cached, within the load bound), forward, and answer with the node's response.
 * A request refused after its token charge (no node, or the node's own 4xx/5xx) gets the charge
 * back before the answer goes out, so the client's next request already sees it. Once a node has
 * answered, where the key was served is remembered in the background, never in front of the stream.
 */
import type { Context } from 'hono'
import { ApiError } from '../../../shared/src/api-error.ts'
import { effectivePriority, lowestAsk } from '../../../shared/src/priority.ts'
import { randomUint32 } from '../../../shared/src/random-pool.ts'
import { WIRE_HEADERS } from '../../../shared/src/wire-headers.ts'
import type { AppEnv, AffinityReason } from '../context.ts'
import type { EdgeDeps } from '../deps.ts'
import { CLIENT_CLOSED_STATUS } from '../latency/outcome.ts'
import { putLimitHeaders, refundCharge } from '../middleware/rate-limit.ts'
import { putRequestIdHeaders } from '../middleware/request-id.ts'
import { forward } from '../proxy/forward.ts'
import { ClientGone } from '../proxy/node-attempt.ts'
import { sendSupersedeNotice } from '../proxy/supersede-notice.ts'
import type { ForwardResult } from '../proxy/forward-request.ts'
import { resumeCounter } from '../proxy/resume-counter.ts'
import type { AffinityMemory } from '../routing/affinity-memory.ts'
import { CONTEXT_ID_HEADER, followUpKeyOf } from '../routing/affinity-key.ts'
import { routeByAffinity, type AffinityRoute } from '../routing/affinity-route.ts'
import { clientLocation, edgeColo } from '../routing/client-location.ts'
import { allBusyForMs, pickNodes, type RankedNode } from '../routing/pick-node.ts'
import type { NodeTable } from '../routing/node-registry.ts'
import type { SupersedeLedger } from '../routing/supersede-ledger.ts'
import type { RecentDispatches } from '../routing/recent-dispatches.ts'

/** What the handler keeps across requests (per isolate). */
export interface GenerateRouting {
  memory: AffinityMemory
  dispatches: RecentDispatches
}

export function generate(deps: EdgeDeps, now: () => number, routing: GenerateRouting) {
  return async (c: Context<AppEnv>): Promise<Response> => {
    const { codec, gen, body } = c.get('generate')
    const principal = c.get('principal')
    const edge = edgeColo(c.req.raw) ?? deps.config.edgeRegion
    const key = c.get('affinity')
    const location = clientLocation(c.req.raw, deps.config)
    /**
     * A table ranked for this client and placed by the key; `exclude`: nodes this request saw fail.
     * Synchronous: a burst's requests each see the ones placed before them (the dispatch is
     * counted in the same turn of the event loop as the choice).
     */
    let busyForMs: number | undefined
    const place = (table: NodeTable, exclude?: ReadonlySet<string>): AffinityRoute => {
      const ranked = pickNodes(table.nodes, gen.model, location, now()).filter((n) => !exclude?.has(n.id))
      busyForMs = ranked.length === 0 ? allBusyForMs(table.nodes, gen.model, now()) : undefined
      if (!key) return { nodes: ranked, reason: 'none' }
      return routeByAffinity(ranked, key.point, routing.memory.recall(key.hash), {
        balanceFactor: deps.config.affinity.balanceFactor,
        // The same estimate as the token charge: body bytes / 4.
        promptTokens: Math.ceil(body.byteLength / 4),
        loadOf: (n: RankedNode) => Math.max(0, n.running + n.waiting + routing.dispatches.sinceHeartbeat(n.id, n.ts)),
      })
    }
    // The next turn of a stored conversation names this answer: it goes where this one's prefix is.
    const followUp = key && codec.stored ? followUpKeyOf(gen, principal.tenant, c.req.header(CONTEXT_ID_HEADER), codec.stored.id(c.get('requestId'))) : undefined
    const rememberAt = (node: { region: string; id: string }) => {
      const where = { region: node.region, node: node.id }
      if (key) routing.memory.remember(key.hash, where, c.get('waitUntil'))
      if (followUp) routing.memory.remember(followUp.hash, where, c.get('waitUntil'))
    }
    const route = place(await deps.registry.table(c.get('waitUntil')))
    // Counted as load on its node from now on, so the next requests of a burst see it.
    const dispatch = route.nodes[0] ? routing.dispatches.begin(route.nodes[0].id) : undefined

    let result: ForwardResult
    try {
      // Every node is full (each answered overloaded within its own retry hint): say so, as the
      // nodes would, rather than 502 — a client that backs off for retry-after-ms gets served.
      if (route.nodes.length === 0 && busyForMs !== undefined) throw new ApiError('overloaded', 'Every GPU node serving this model is at capacity; please retry.', { retryAfterMs: busyForMs })
      if (route.nodes.length === 0) throw new ApiError('upstream_unavailable', 'No GPU node serving this model is available right now; please retry.', { retryAfterMs: 1000 })
      result = await forward(route.nodes, {
        path: codec.path,
        body,
        stream: gen.stream,
        resumable: gen.stream && (gen.n ?? 1) === 1,
        codec,
        requestId: c.get('requestId'),
        traceparent: c.get('traceparent'),
        tenant: principal.tenant,
        keyId: principal.keyId,
        priority: effectivePriority(principal.priorityClass, lowestAsk(c.get('generate').priorityAsk, gen.priority)),
        edge,
        signal: deps.clientSignal?.(c) ?? c.req.raw.signal,
        startedAtMs: c.get('startedAtMs'),
        // Fixed up front so that a continuation samples exactly as the first node would have.
        seed: gen.stream ? randomUint32() : undefined,
        supersede: c.get('generate').supersede,
      }, {
        upstream: deps.upstream,
        secret: deps.config.edgeSharedSecret,
        digest: deps.digest,
        connectTimeoutMs: deps.config.upstreamConnectTimeoutMs,
        requestTimeoutMs: deps.config.requestTimeoutMs,
        markDown: (id, busyForMs) => deps.registry.markDown(id, busyForMs),
        now,
        maxResumes: deps.config.maxResumes,
        stallMs: deps.config.streamStallMs,
        onResume: (outcome) => resumeCounter.add(outcome),
        // A continuation is placed like a new request with its failed nodes gone: the failed
        // holder's prefix went with it, so the key's ring walk (or another node that holds it) decides.
        resumeNodes: async (exclude) => place(await deps.registry.table(c.get('waitUntil')), exclude).nodes,
        relayedStreams: deps.relayedStreams,
        onResumedOn: (node) => {
          dispatch?.moveTo(node.id)
          // The continuing node now holds the conversation's prefix (prompt + answer so far).
          rememberAt(node)
        },
      })
    } catch (e) {
      dispatch?.end()
      await refundCharge(c, deps.limiter)
      if (e instanceof ClientGone) return new Response(null, { status: CLIENT_CLOSED_STATUS })
      throw e
    }
    if (dispatch) {
      dispatch.moveTo(result.node.id)
      const end = () => dispatch.end()
      result.finished.then(end, end)
    }
    if (result.status >= 400) await refundCharge(c, deps.limiter)

    // A failover took it off the chosen node: it is not where the key's prefix was expected.
    const affinity: AffinityReason = !key ? 'none' : result.node === route.nodes[0] ? route.reason : 'moved'
    if (result.status < 400) rememberAt(result.node)
    const supersede = c.get('generate').supersede
    if (supersede !== undefined && deps.supersede && result.status < 400) {
      c.get('waitUntil')(tellSupersededNode(deps, deps.supersede, supersede, principal.tenant, result.node.id, c.get('startedAtMs'), `${c.get('requestId')}:supersede`, now))
    }
    // latency/observe-request.ts records and logs the request once this body ends.
    c.set('forwarded', { nodeRegion: result.node.region, failovers: result.failedAttempts, affinity, finished: result.finished })
    // Every header the edge adds goes in with the node's, in one record (the middlewares that
    // would add them to the finished response see `edgeHeadersAdded` and leave it).
    c.set('edgeHeadersAdded', true)
    return result.respond((headers) => {
      putLimitHeaders(headers, codec, c.get('rateLimit'), now())
      headers[WIRE_HEADERS.affinity] = affinity
      putRequestIdHeaders(c, headers)
    })
  }
}

/**
 * After a request of a supersede group was admitted: record where it runs, and tell the node that
 * the ledger names (one running an older request of the group, or this request's own node when a
 * newer one runs elsewhere). Failures only lose the notice.
 */
async function tellSupersededNode(deps: EdgeDeps, ledger: SupersedeLedger, key: string, tenant: string, nodeId: string, at: number, requestId: string, now: () => number): Promise<void> {
  try {
    const notice = await ledger.record(tenant, key, nodeId, at)
    if (!notice) return
    const node = (await deps.registry.table()).nodes.find((n) => n.id === notice.node)
    if (!node) return
    await sendSupersedeNotice(node, tenant, requestId, { key, before: notice.before }, {
      upstream: deps.upstream,
      secret: deps.config.edgeSharedSecret,
      digest: deps.digest,
      now,
      connectTimeoutMs: deps.config.upstreamConnectTimeoutMs,
    })
  } catch {
    // Best effort: a lost notice leaves an older request running to its end, as before.
  }
}
