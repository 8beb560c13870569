/**
 * Bench-only Worker that only proxies: the request's path, headers and body to UPSTREAM, the
 * response as its own. Run under the same local Workers set-ups as the edge (bench/scenarios/
 * edge-streams.ts), it tells the runtime's own cost from the edge's: a stall it shows too is
 * not in our code.
 */
export default {
  fetch(request: Request, env: { UPSTREAM: string }): Promise<Response> {
    const url = new URL(request.url)
    return fetch(env.UPSTREAM + url.pathname, { method: request.method, headers: request.headers, body: request.body })
  },
}
