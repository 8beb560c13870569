/**
 * Where a benchmark client sends each request of a multi-turn workload: through an edge, or to
 * the GPU nodes directly by the rules cache-blind routers use, as the baselines cache-affine
 * routing is compared with (bench/scenarios/prefix-routing.ts):
 * - round robin: each request to the next node in turn (vLLM production-stack's default router,
 *   Dynamo's `round-robin` mode);
 * - least outstanding: each request to the node with the fewest requests in flight from this
 *   client (a load-aware scorer without a prefix scorer, as llm-d's queue scorer alone).
 * Direct requests carry what the edge would: a signature over the exact body, a request id and
 * the tenant (which salts the node's prefix cache for a signed request, DESIGN.md §7), so a node
 * keys its cache exactly as it does behind the edge.
 */
import { randomBytes } from 'node:crypto'
import { nodeDigest } from '../../shared/src/node-digest.ts'
import { signRequest } from '../../shared/src/signature.ts'
import { WIRE_HEADERS } from '../../shared/src/wire-headers.ts'

/** One request's destination; `done()` once its response has ended. */
export interface Route {
  origin: string
  headers: Record<string, string>
  done(): void
}

export interface Router {
  name: string
  route(path: string, body: Uint8Array): Route
}

/** Every request to one origin (an edge, which routes it; or one node), with the client's own headers. */
export function oneOrigin(name: string, url: string, headers: Record<string, string> = {}): Router {
  return { name, route: () => ({ origin: url, headers, done: () => {} }) }
}

export interface DirectOptions {
  /** The nodes' origins. */
  nodes: readonly string[]
  /** EDGE_SHARED_SECRET the nodes verify with. */
  secret: string
  tenant: string
}

export function roundRobin(o: DirectOptions): Router {
  let next = 0
  return { name: 'round robin', route: (path, body) => direct(o, o.nodes[next++ % o.nodes.length]!, path, body) }
}

export function leastOutstanding(o: DirectOptions): Router {
  const inFlight = o.nodes.map(() => 0)
  let last = -1
  return {
    name: 'least outstanding',
    route: (path, body) => {
      // Fewest in flight; ties go to the first node after the last pick, so idle nodes share the work.
      let best = -1
      for (let k = 1; k <= o.nodes.length; k++) {
        const i = (last + k) % o.nodes.length
        if (best < 0 || inFlight[i]! < inFlight[best]!) best = i
      }
      last = best
      inFlight[best]!++
      return { ...direct(o, o.nodes[best]!, path, body), done: () => void inFlight[best]!-- }
    },
  }
}

function direct(o: DirectOptions, origin: string, path: string, body: Uint8Array): Route {
  const requestId = `req_${randomBytes(16).toString('hex')}`
  const signature = signRequest({ secret: o.secret, method: 'POST', path, requestId, body, nowMs: Date.now() }, nodeDigest)
  if (typeof signature !== 'string') throw new Error('node:crypto signs synchronously')
  return {
    origin,
    headers: { [WIRE_HEADERS.requestId]: requestId, [WIRE_HEADERS.tenant]: o.tenant, [WIRE_HEADERS.signature]: signature },
    done: () => {},
  }
}
