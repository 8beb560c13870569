/**
 * A node's answer as the edge hands it to the client: its status, its headers as a plain record
 * and its body, made into a Response once, with every header the edge adds already in the record
 * (generate.ts). What the Node entry needs to write it (whether it is an event stream, the
 * headers, the pass-through's relay) is kept beside the Response, keyed by it.
 *
 * Why a plain record: each `headers.set` on a Response validates the name and the value, and the
 * Node adapter then iterates a Headers object in sorted order to write it. A record goes to
 * `writeHead` as it is (@hono/node-server's Response keeps it; so does the relay). Adding the
 * edge's ten or so headers to a Headers object after the fact was ~3 % of the edge's busy CPU.
 */
import type { Relay } from './pass-through.ts'

export interface ForwardedFacts {
  readonly status: number
  /** Lower-case names, none of them connection-level (forward.ts drops those); complete once made (nothing adds to it after). */
  readonly headers: Record<string, string>
  readonly sse: boolean
  /** The pass-through's direct relay (Node upstreams): whoever takes it writes the response. */
  relay?: Relay
}

/** What a Response is made from (BodyInit, spelled so both the Workers and the Node typings name it). */
export type ResponseBody = ConstructorParameters<typeof Response>[0]

const facts = new WeakMap<Response, ForwardedFacts>()

export function forwardedResponse(body: ResponseBody, fact: ForwardedFacts): Response {
  const response = new Response(body, { status: fact.status, headers: fact.headers })
  facts.set(response, fact)
  return response
}

/**
 * What the edge knows of a forwarded response without reading its headers back; undefined for
 * one the edge made itself (an error, a refusal) or one a middleware replaced. Asking costs no
 * web Response and no Headers.
 */
export function forwardedFacts(response: Response): ForwardedFacts | undefined {
  return facts.get(response)
}

/** The relay of a forwarded response, taken once: its taker writes the response and never reads `body`. */
export function takeRelay(response: Response): Relay | undefined {
  const fact = facts.get(response)
  const relay = fact?.relay
  if (fact) fact.relay = undefined
  return relay
}
