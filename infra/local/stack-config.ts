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

export interface StackOptions {
  /** How many of REGIONS to run (1..REGIONS.length; more reuse the list with new ports). */
  regions: number
  edge: 'wrangler' | 'node'
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
}

export interface PortPlan {
  redis: number
  bridge: number
  edge: number
  /** One per region, in regionsFor order. */
  nodes: number[]
  /** wrangler dev's devtools port (default: wrangler picks one). */
  inspector?: number
}

/** The ports this stack uses: `opts.ports`, else the fixed local layout (DESIGN.md §9). */
export function portPlan(opts: StackOptions): PortPlan {
  if (opts.ports) {
    if (opts.ports.nodes.length < opts.regions) throw new Error(`port plan: ${opts.regions} regions need ${opts.regions} node ports`)
    return opts.ports
  }
  return {
    redis: LOCAL.redisPort,
    bridge: LOCAL.bridgePort,
    edge: opts.edge === 'node' ? LOCAL.nodeEdgePort : LOCAL.wranglerPort,
    nodes: regionsFor(opts.regions).map((r) => r.port),
  }
}

/** The stack's regions, on the port plan's node ports. */
export function stackRegions(opts: StackOptions): Region[] {
  const { nodes } = portPlan(opts)
  return regionsFor(opts.regions).map((r, i) => ({ ...r, port: nodes[i]! }))
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
  const nodes = stackRegions(opts).map((r) => ({ id: `local-${r.name}`, url: `http://${LOCAL.host}:${r.port}`, region: r.name, lat: r.lat, lon: r.lon, models: [modelId] }))
  return {
    UPSTASH_REDIS_REST_URL: bridgeUrl(opts),
    UPSTASH_REDIS_REST_TOKEN: LOCAL.upstashToken,
    EDGE_SHARED_SECRET: LOCAL.edgeSharedSecret,
    GPU_NODES: JSON.stringify(nodes),
    ADMIN_TOKEN: opts.adminToken,
    DEFAULT_RPM: String(LOCAL.defaultRpm),
    DEFAULT_TPM: String(LOCAL.defaultTpm),
    EDGE_REGION: 'local',
    EDGE_LAT: String(REGIONS[0].lat),
    EDGE_LON: String(REGIONS[0].lon),
    DEV_MODE: '1',
    ...opts.edgeVars,
  }
}

/** A GPU node's environment for one region. */
export function nodeEnv(opts: StackOptions, r: Region): Record<string, string> {
  return {
    MODEL_DIR: opts.modelDir,
    HOST: LOCAL.host,
    PORT: String(r.port),
    NODE_ID: `local-${r.name}`,
    REGION: r.name,
    REGION_LAT: String(r.lat),
    REGION_LON: String(r.lon),
    PUBLIC_URL: `http://${LOCAL.host}:${r.port}`,
    EDGE_SHARED_SECRET: LOCAL.edgeSharedSecret,
    UPSTASH_REDIS_REST_URL: bridgeUrl(opts),
    UPSTASH_REDIS_REST_TOKEN: LOCAL.upstashToken,
    // Three nodes share two cores locally: one ONNX Runtime thread each keeps them from thrashing.
    INTRA_OP_THREADS: '1',
    ...opts.nodeVars,
  }
}
