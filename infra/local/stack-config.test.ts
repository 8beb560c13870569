import { describe, expect, it } from 'vitest'
import { edgeEnv, LOCAL, nodeEnv, portPlan, stackNodes, stackRegions, type StackOptions } from './stack-config.ts'
import { parseStackFlags } from './stack-flags.ts'

const base: StackOptions = { regions: 3, edge: 'node', modelDir: 'models/tiny', devApiKey: LOCAL.devApiKey, adminToken: LOCAL.adminToken }

describe('stack layout', () => {
  it('keeps one node per region on the fixed ports and ids by default', () => {
    expect(stackNodes(base).map((n) => [n.id, n.port, n.service])).toEqual([
      ['local-us-east', 9101, 'gpu-node-us-east'],
      ['local-eu-west', 9102, 'gpu-node-eu-west'],
      ['local-ap-south', 9103, 'gpu-node-ap-south'],
    ])
    expect(stackRegions(base).map((r) => [r.name, r.port])).toEqual([['us-east', 9101], ['eu-west', 9102], ['ap-south', 9103]])
  })

  it('runs N nodes per region, each with its own port and node id, all in GPU_NODES', () => {
    const opts = { ...base, regions: 2, nodesPerRegion: 3 }
    const nodes = stackNodes(opts)
    expect(nodes.map((n) => [n.id, n.region.name, n.port])).toEqual([
      ['local-us-east', 'us-east', 9101],
      ['local-us-east-2', 'us-east', 9111],
      ['local-us-east-3', 'us-east', 9121],
      ['local-eu-west', 'eu-west', 9102],
      ['local-eu-west-2', 'eu-west', 9112],
      ['local-eu-west-3', 'eu-west', 9122],
    ])
    expect(new Set(nodes.map((n) => n.port)).size).toBe(6)
    const env = nodeEnv(opts, nodes[1]!)
    expect(env).toMatchObject({ NODE_ID: 'local-us-east-2', PORT: '9111', REGION: 'us-east', PUBLIC_URL: 'http://127.0.0.1:9111' })
    const gpuNodes = JSON.parse(edgeEnv(opts).GPU_NODES!) as Array<{ id: string; url: string; region: string }>
    expect(gpuNodes.map((n) => [n.id, n.region, n.url])).toEqual(nodes.map((n) => [n.id, n.region.name, `http://127.0.0.1:${n.port}`]))
  })

  it('takes node ports region by region from a given port plan, and needs enough of them', () => {
    const ports = { redis: 1, bridge: 2, edge: 3, nodes: [10, 11, 12, 13] }
    expect(stackNodes({ ...base, regions: 2, nodesPerRegion: 2, ports }).map((n) => [n.id, n.port])).toEqual([
      ['local-us-east', 10], ['local-us-east-2', 11], ['local-eu-west', 12], ['local-eu-west-2', 13],
    ])
    expect(() => portPlan({ ...base, regions: 3, nodesPerRegion: 2, ports })).toThrow('need 6 node ports')
    expect(() => stackNodes({ ...base, nodesPerRegion: 0 })).toThrow('nodes per region')
  })
})

describe('parseStackFlags', () => {
  it('reads --nodes-per-region (default 1) beside the other flags', () => {
    expect(parseStackFlags([], {})).toMatchObject({ regions: 3, nodesPerRegion: 1, edge: 'miniflare', modelDir: 'trained/zl-code', devApiKey: LOCAL.devApiKey })
    expect(parseStackFlags(['--nodes-per-region', '2', '--regions', '1', '--edge', 'node'], { DEV_API_KEY: 'zl-x' })).toMatchObject({ regions: 1, nodesPerRegion: 2, edge: 'node', devApiKey: 'zl-x' })
    expect(() => parseStackFlags(['--nodes-per-region', '0'], {})).toThrow('--nodes-per-region')
    expect(() => parseStackFlags(['--nodes-per-region', '9'], {})).toThrow('--nodes-per-region')
  })

  it('runs the GPU nodes at nice 10 unless --node-nice says otherwise (0: off)', () => {
    expect(parseStackFlags([], {}).nodeNice).toBe(10)
    expect(parseStackFlags(['--node-nice', '0'], {}).nodeNice).toBe(0)
    expect(() => parseStackFlags(['--node-nice', '20'], {})).toThrow('--node-nice')
  })

  it("defaults to the Workers edge on Miniflare directly (no ProxyWorker hop); --edge wrangler is wrangler's dev engine, --edge wrangler-inspector plain wrangler dev", () => {
    expect(parseStackFlags([], {}).edge).toBe('miniflare')
    expect(parseStackFlags(['--edge', 'wrangler'], {}).edge).toBe('wrangler')
    expect(parseStackFlags(['--edge', 'wrangler-inspector'], {}).edge).toBe('wrangler-inspector')
    expect(() => parseStackFlags(['--edge', 'workerd'], {})).toThrow('--edge')
  })
})
