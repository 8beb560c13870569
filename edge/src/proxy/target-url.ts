/**
 * Where a request goes on a node: the node URL (which may carry a base path) joined with the
 * route path, without a query. Parsed once per node and route and kept: a `new URL()` per
 * request was ~1.4 % of the Node edge's CPU in the stage profile (bench/scenarios/edge-profile.ts),
 * for an answer that only changes when the node list does. Bounded: a registry that churns
 * through node URLs cannot grow it past MAX_TARGETS (it starts over).
 */

export interface Target {
  href: string
  /** The path the request signature covers. */
  pathname: string
}

const MAX_TARGETS = 1024
const targets = new Map<string, Target>()

export function targetUrl(nodeUrl: string, path: string): Target {
  const key = `${nodeUrl} ${path}`
  const known = targets.get(key)
  if (known) return known
  const url = new URL(nodeUrl)
  url.pathname = url.pathname.replace(/\/+$/, '') + path
  url.search = ''
  const target = { href: url.href, pathname: url.pathname }
  if (targets.size >= MAX_TARGETS) targets.clear()
  targets.set(key, target)
  return target
}
