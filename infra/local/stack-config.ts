/**
 * The local stack's fixed layout (DESIGN.md §9): ports, the three simulated regions, dev
 * credentials. Everything the supervisor starts is derived from `StackOptions`.
 */

export interface Region {
  name: string
  port: number
  lat: number
  lon: number
}

export const REGIONS: Region[] = [
  { name: 'us-east', port: 9101, lat: 39.0, lon: -77.5 },
  { name: 'eu-west', port: 9102, lat: 53.3, lon: -6.3 },
  { name: 'ap-south', port: 9103, lat: 19.1, lon: 72.9 },
]

export const LOCAL = {
  host: '127.0.0.1',
  redisPort: 6380,
  bridgePort: 8079,
  wranglerPort: 8787,
  nodeEdgePort: 8788,
  upstashToken: 'zl-dev-upstash-token',
  devApiKey: 'zl-devlocalkey000000000000000000000',
  adminToken: 'zl-dev-admin-token',
  /** Dev only: signs edge → node requests in the local stack. */
  edgeSharedSecret: 'zl-dev-edge-secret',
  defaultRpm: 100_000,
  defaultTpm: 100_000_000,
}

/** One GPU node of the stack: the `index`-th (0-based) of its region. */
export interface StackNode {
  region: Region
  index: number
  /** NODE_ID: `local-<region>` for a region's first node (as with one node per region), `local-<region>-<n>` for the n-th. */
  id: string
  port: number
  /** The supervisor's service name: `gpu-node-<region>`, `gpu-node-<region>-<n>`. */
  service: string
}

/** Most nodes per region the fixed port layout has room for (ports 9101 + 10·k + region). */
export const MAX_NODES_PER_REGION = 8

export const EDGE_KINDS = ['wrangler', 'miniflare', 'wrangler-inspector', 'node'] as const
export type EdgeKind = (typeof EDGE_KINDS)[number]
/**
 * `npm start`'s edge: the Worker on Miniflare directly (wrangler's build and wrangler.toml, no
 * ProxyWorker hop). Under wrangler's dev engine (`wrangler`) every request also crosses
 * wrangler's ProxyWorker, a second workerd: at 64 concurrent streams TTFB p50 was 2.2–2.6× and
 * p99 1.0–1.4× (medians of rounds, three runs) what the same Worker had on Miniflare alone
 * (edge/README.md "wrangler dev and streams").
 */
export const DEFAULT_EDGE_KIND: EdgeKind = 'miniflare'

export interface StackOptions {
  /** How many of REGIONS to run (1..REGIONS.length; more reuse the list with new ports). */
  regions: number
  /** GPU nodes per region (default 1), each with its own port and node id: cache-affine routing spreads conversations over them. */
  nodesPerRegion?: number
  /**
   * `miniflare` (DEFAULT_EDGE_KIND): the Worker on Miniflare's API directly, with wrangler's build
   * and config reading but no ProxyWorker in front (infra/local/miniflare-edge.ts); `wrangler`:
   * the same Worker under wrangler's dev engine with the DevTools inspector off (plain `wrangler
   * dev` stalls concurrent streams, infra/local/wrangler-dev.ts);
   * `wrangler-inspector`: plain `wrangler dev`, DevTools on, streams stall; `node`: the Node entry.
   */
  edge: EdgeKind
  modelDir: string
  devApiKey: string
  adminToken: string
  /** Logs and generated files; default `.stack`. */
  stateDir?: string
  /** Ports; default the fixed LOCAL/REGIONS ones. Tests pass free ports to run beside `npm start`. */
  ports?: PortPlan
  /** Extra edge variables (RATE_LIMIT_FAILURE_MODE, RATE_LIMIT_TIMEOUT_MS, MAX_BODY_BYTES, …). */
  edgeVars?: Record<string, string>
  /** Extra GPU node variables (MAX_BATCH, MAX_QUEUE, …), for every node. */
  nodeVars?: Record<string, string>
  /** WAN delays between the edge and other regions' nodes (stack-wan.ts); undefined: all direct. */
  wan?: WanOptions
  /**
   * The GPU nodes' nice(1) increment (0 or absent: none). In production the edge, Redis and the
   * nodes are separate machines; here they share a few cores, and under overload the nodes'
   * ONNX Runtime threads starved the simulated edge: measured on 2 cores, 3× overload through the
   * wrangler dev edge, refusals took 2.6 s (p50) at the client, 0.4 s of it inside the edge's code,
   * and 28 of 1650 came without retry-after-ms; at nice 10, 16 ms (p50), every one with its hint.
   */
  nodeNice?: number
  /**
   * The `miniflare` and `wrangler` edges rebuild and restart when their sources change (default
   * true, as `wrangler dev` does). false for measurements: an edit during bench/overload.ts
   * restarted workerd 225 s into a 240 s run (289 connections refused, its memory figures cut short).
   */
  edgeWatch?: boolean
  /** Node id → the URL the edge reaches it at, where not its own port: set by startStack from the WAN relays. */
  nodeUrls?: Record<string, string>
}

/** `npm start --wan` / `--rtt` (stack-wan.ts parses them and starts the relays). */
export interface WanOptions {
  /** Round trip per region pair, ms, keyed by stack-wan.ts `pairKey` (both orders mean the same link). */
  rttMs: Record<string, number>
}

/** Where the edge reaches a node: its own port, unless a WAN relay stands in front of it (stack-wan.ts). */
export function nodeUrl(opts: Pick<StackOptions, 'nodeUrls'>, node: StackNode): string {
  return opts.nodeUrls?.[node.id] ?? `http://${LOCAL.host}:${node.port}`
}

export interface PortPlan {
  redis: number
  bridge: number
  edge: number
  /** One per node, region by region (every node of the first region, then the next…): stackNodes' order. */
  nodes: number[]
  /** The DevTools inspector's port under `wrangler-inspector` (default: wrangler picks one); unused otherwise. */
  inspector?: number
}

/** The ports this stack uses: `opts.ports`, else the fixed local layout (DESIGN.md §9). */
export function portPlan(opts: StackOptions): PortPlan {
  const perRegion = nodesPerRegion(opts)
  if (opts.ports) {
    const needed = opts.regions * perRegion
    if (opts.ports.nodes.length < needed) throw new Error(`port plan: ${opts.regions} regions × ${perRegion} nodes need ${needed} node ports`)
    return opts.ports
  }
  return {
    redis: LOCAL.redisPort,
    bridge: LOCAL.bridgePort,
    edge: opts.edge === 'node' ? LOCAL.nodeEdgePort : LOCAL.wranglerPort,
    // A region's first node keeps its port (9101…); its k-th extra one is 10·k above it.
    nodes: regionsFor(opts.regions).flatMap((r) => Array.from({ length: perRegion }, (_, k) => r.port + 10 * k)),
  }
}

export function nodesPerRegion(opts: Pick<StackOptions, 'nodesPerRegion'>): number {
  const n = opts.nodesPerRegion ?? 1
  if (!Number.isInteger(n) || n < 1 || n > MAX_NODES_PER_REGION) throw new Error(`nodes per region must be 1..${MAX_NODES_PER_REGION}, got ${n}`)
  return n
}

/** Every GPU node of the stack, region by region, on the port plan's node ports. */
export function stackNodes(opts: StackOptions): StackNode[] {
  const { nodes } = portPlan(opts)
  const perRegion = nodesPerRegion(opts)
  return regionsFor(opts.regions).flatMap((region, i) =>
    Array.from({ length: perRegion }, (_, index): StackNode => {
      const suffix = index === 0 ? '' : `-${index + 1}`
      const port = nodes[i * perRegion + index]!
      return { region: { ...region, port: nodes[i * perRegion]! }, index, id: `local-${region.name}${suffix}`, port, service: `gpu-node-${region.name}${suffix}` }
    }),
  )
}

/** The stack's regions, each with its first node's port. */
export function stackRegions(opts: StackOptions): Region[] {
  return stackNodes(opts).filter((n) => n.index === 0).map((n) => n.region)
}

/** Regions 1..n; beyond the three named ones, numbered copies on the next ports. */
export function regionsFor(n: number): Region[] {
  return Array.from({ length: n }, (_, i) => {
    const base = REGIONS[i % REGIONS.length]
    return i < REGIONS.length ? base : { ...base, name: `${base.name}-${Math.floor(i / REGIONS.length) + 1}`, port: 9101 + i }
  })
}

export function bridgeUrl(opts: StackOptions): string {
  return `http://${LOCAL.host}:${portPlan(opts).bridge}`
}

/** The edge's environment (wrangler vars or the Node entry's env) for this stack. */
export function edgeEnv(opts: StackOptions): Record<string, string> {
  const modelId = opts.modelDir.replace(/\/+$/, '').split('/').pop() ?? 'tiny'
  const nodes = stackNodes(opts).map((n) => ({ id: n.id, url: nodeUrl(opts, n), region: n.region.name, lat: n.region.lat, lon: n.region.lon, models: [modelId] }))
  return {
    UPSTASH_REDIS_REST_URL: bridgeUrl(opts),
    UPSTASH_REDIS_REST_TOKEN: LOCAL.upstashToken,
    EDGE_SHARED_SECRET: LOCAL.edgeSharedSecret,
    GPU_NODES: JSON.stringify(nodes),
    ADMIN_TOKEN: opts.adminToken,
    DEFAULT_RPM: String(LOCAL.defaultRpm),
    DEFAULT_TPM: String(LOCAL.defaultTpm),
    // The stack's one edge sits in the first region (stack-wan.ts): its nodes there are next door.
    EDGE_REGION: REGIONS[0].name,
    EDGE_LAT: String(REGIONS[0].lat),
    EDGE_LON: String(REGIONS[0].lon),
    DEV_MODE: '1',
    ...opts.edgeVars,
  }
}

/** One GPU node's environment. */
export function nodeEnv(opts: StackOptions, node: StackNode): Record<string, string> {
  const r = node.region
  return {
    MODEL_DIR: opts.modelDir,
    HOST: LOCAL.host,
    PORT: String(node.port),
    NODE_ID: node.id,
    REGION: r.name,
    REGION_LAT: String(r.lat),
    REGION_LON: String(r.lon),
    // What its heartbeat tells the edge: across a WAN, the relay in front of it.
    PUBLIC_URL: nodeUrl(opts, node),
    EDGE_SHARED_SECRET: LOCAL.edgeSharedSecret,
    UPSTASH_REDIS_REST_URL: bridgeUrl(opts),
    UPSTASH_REDIS_REST_TOKEN: LOCAL.upstashToken,
    // Several nodes share two cores locally: one ONNX Runtime thread each keeps them from thrashing.
    INTRA_OP_THREADS: '1',
    ...opts.nodeVars,
  }
}
