/**
 * `npm start -- --wan` (or `--rtt us-east:eu-west=70,…`): real WAN delays between the stack's
 * edge and the nodes of other regions, so routing, failover and the dashboard see the RTT
 * structure of a real deployment on one machine. No root: each remote node gets a userspace
 * delaying TCP relay on 127.0.0.1 (wan-relay.ts; this kernel has no netem) and the node
 * publishes the relay's URL as its PUBLIC_URL, so the edge reaches it only across the link.
 *
 * The stack has one edge and it sits in the first region (EDGE_LAT/EDGE_LON are that region's),
 * so the links that matter are first region → every other region; a node of the edge's own
 * region is reached directly. Heartbeats and Redis stay undelayed (Redis sits beside the edge
 * here, as Upstash's nearest replica would).
 */
import { z } from 'zod'
import { greatCircleKm } from '../../edge/src/routing/pick-node.ts'
import type { Region, StackNode, WanOptions } from './stack-config.ts'
import { startWanRelay, type WanRelay } from './wan-relay.ts'

/**
 * Real paths are not great circles: ~1.4 × the fibre time over the great circle (2/3 c, 1 ms per
 * 100 km round trip) gives 76 / 180 / 106 ms for us-east↔eu-west / us-east↔ap-south /
 * eu-west↔ap-south, near the 70 / 190 / 120 ms measured between such cloud regions.
 */
export const WAN_ROUTE_FACTOR = 1.4
export const MAX_WAN_RTT_MS = 2000

/** The key of an unordered region pair. */
export function pairKey(a: string, b: string): string {
  return a < b ? `${a}:${b}` : `${b}:${a}`
}

/** The default RTT between two regions: great-circle distance × WAN_ROUTE_FACTOR at 1 ms per 100 km. */
export function greatCircleRttMs(a: Region, b: Region): number {
  return Math.round((greatCircleKm(a, b) / 100) * WAN_ROUTE_FACTOR)
}

const RttSpec = z
  .string()
  .regex(/^([a-z0-9-]+):([a-z0-9-]+)=(\d+(?:\.\d+)?)$/, 'expected <region>:<region>=<ms>, e.g. us-east:eu-west=70')
  .transform((s) => {
    const m = /^([a-z0-9-]+):([a-z0-9-]+)=(.+)$/.exec(s)!
    return { a: m[1]!, b: m[2]!, ms: Number(m[3]) }
  })
  .refine((r) => r.a !== r.b, 'a link joins two different regions')
  .refine((r) => r.ms <= MAX_WAN_RTT_MS, `RTT at most ${MAX_WAN_RTT_MS} ms`)

/**
 * `--wan` / `--rtt` → WanOptions for these regions (undefined: no WAN, every node direct). Each
 * `--rtt` value is one or more comma-separated `<a>:<b>=<ms>`; pairs not given get the
 * great-circle default. `--rtt` alone turns the WAN on.
 */
export function parseWanFlags(wan: boolean | undefined, rtt: readonly string[] | undefined, regions: readonly Region[]): WanOptions | undefined {
  const specs = (rtt ?? []).flatMap((v) => v.split(',')).map((s) => s.trim()).filter(Boolean)
  if (!wan && specs.length === 0) return undefined
  const rttMs: Record<string, number> = {}
  for (const [i, a] of regions.entries()) for (const b of regions.slice(i + 1)) rttMs[pairKey(a.name, b.name)] = greatCircleRttMs(a, b)
  const known = new Set(regions.map((r) => r.name))
  for (const spec of specs) {
    const parsed = RttSpec.safeParse(spec)
    if (!parsed.success) throw new Error(`bad flags: --rtt ${spec}: ${parsed.error.issues.map((i) => i.message).join('; ')}`)
    const { a, b, ms } = parsed.data
    for (const r of [a, b]) if (!known.has(r)) throw new Error(`bad flags: --rtt ${spec}: no region ${r} in this stack (${[...known].join(', ')})`)
    rttMs[pairKey(a, b)] = ms
  }
  return { rttMs }
}

/** One node reached across the WAN. */
export interface WanLink {
  nodeId: string
  from: string
  to: string
  rttMs: number
  relay: WanRelay
}

export interface WanLinks {
  links: WanLink[]
  /** The URL the edge (and the node's heartbeat) should use for this node: its relay's, or the node itself. */
  urlOf(node: StackNode, direct: string): string
  /** One line per remote region for the banner; empty without a WAN. */
  describe(): string[]
  close(): Promise<void>
}

/**
 * A relay per node outside the edge's region (the first of `nodes`' regions), at that region
 * pair's RTT. Relays listen before the nodes start; they connect to a node only when a client
 * connects through them.
 */
export async function startWanLinks(wan: WanOptions | undefined, nodes: readonly StackNode[], host: string): Promise<WanLinks> {
  const links: WanLink[] = []
  const from = nodes[0]?.region.name
  const close = () => Promise.all(links.map((l) => l.relay.close())).then(() => undefined)
  try {
    for (const n of wan && from ? nodes : []) {
      if (n.region.name === from) continue
      const rttMs = wan!.rttMs[pairKey(from!, n.region.name)]
      if (rttMs === undefined) throw new Error(`no RTT for ${from}:${n.region.name}`)
      links.push({ nodeId: n.id, from: from!, to: n.region.name, rttMs, relay: await startWanRelay({ target: { host, port: n.port }, rttMs }) })
    }
  } catch (e) {
    await close()
    throw e
  }
  const byNode = new Map(links.map((l) => [l.nodeId, l]))
  return {
    links,
    urlOf: (node, direct) => byNode.get(node.id)?.relay.url ?? direct,
    describe: () => {
      if (links.length === 0) return []
      const regions = [...new Map(links.map((l) => [l.to, l.rttMs])).entries()]
      return [`edge in ${from}; ${regions.map(([r, ms]) => `${r} RTT ${ms} ms`).join(', ')} (delaying relays on ${host})`]
    },
    close,
  }
}
