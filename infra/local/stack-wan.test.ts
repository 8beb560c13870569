/**
 * `--wan` / `--rtt` parse once into a full RTT table for the stack's regions (great-circle
 * defaults, given pairs override them in either order, bad specs refused with the flag named), and
 * the relays stand only in front of nodes outside the edge's region, each at its pair's RTT.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { LOCAL, nodeEnv, edgeEnv, regionsFor, stackNodes, type StackOptions } from './stack-config.ts'
import { parseStackFlags } from './stack-flags.ts'
import { greatCircleRttMs, pairKey, parseWanFlags, startWanLinks, type WanLinks } from './stack-wan.ts'

const regions = regionsFor(3)
const base: StackOptions = { regions: 3, edge: 'node', modelDir: 'models/tiny', devApiKey: LOCAL.devApiKey, adminToken: LOCAL.adminToken }

let open: WanLinks | undefined
afterEach(async () => {
  await open?.close()
  open = undefined
})

describe('WAN flags', () => {
  it('is off without --wan or --rtt', () => {
    expect(parseWanFlags(undefined, undefined, regions)).toBeUndefined()
    expect(parseStackFlags([], {}).wan).toBeUndefined()
  })

  it('--wan fills every pair from great-circle distance, near the measured inter-region RTTs', () => {
    const wan = parseStackFlags(['--wan'], {}).wan!
    expect(wan.rttMs).toEqual({ 'eu-west:us-east': 76, 'ap-south:us-east': 180, 'ap-south:eu-west': 106 })
    expect(greatCircleRttMs(regions[0]!, regions[1]!)).toBe(76)
  })

  it('--rtt sets pairs in either order, comma-separated or repeated, and alone turns the WAN on', () => {
    const wan = parseStackFlags(['--rtt', 'us-east:eu-west=70,ap-south:us-east=190', '--rtt', 'eu-west:ap-south=120'], {}).wan!
    expect(wan.rttMs).toEqual({ [pairKey('us-east', 'eu-west')]: 70, [pairKey('us-east', 'ap-south')]: 190, [pairKey('eu-west', 'ap-south')]: 120 })
  })

  it('refuses a malformed spec, an unknown region, a self-link and an absurd RTT', () => {
    expect(() => parseStackFlags(['--rtt', 'us-east-eu-west=70'], {})).toThrow(/--rtt us-east-eu-west=70: expected <region>:<region>=<ms>/)
    expect(() => parseStackFlags(['--regions', '2', '--rtt', 'us-east:ap-south=190'], {})).toThrow(/no region ap-south in this stack/)
    expect(() => parseStackFlags(['--rtt', 'us-east:us-east=5'], {})).toThrow(/two different regions/)
    expect(() => parseStackFlags(['--rtt', 'us-east:eu-west=5000'], {})).toThrow(/at most 2000 ms/)
  })
})

describe('WAN links', () => {
  it('puts a relay in front of each node outside the edge\'s region, at its pair\'s RTT, and the node publishes it', async () => {
    const opts = { ...base, nodesPerRegion: 2, wan: parseWanFlags(false, ['us-east:eu-west=70', 'us-east:ap-south=190'], regions)! }
    const nodes = stackNodes(opts)
    open = await startWanLinks(opts.wan, nodes, LOCAL.host)
    expect(open.links.map((l) => [l.nodeId, l.from, l.to, l.rttMs])).toEqual([
      ['local-eu-west', 'us-east', 'eu-west', 70],
      ['local-eu-west-2', 'us-east', 'eu-west', 70],
      ['local-ap-south', 'us-east', 'ap-south', 190],
      ['local-ap-south-2', 'us-east', 'ap-south', 190],
    ])
    expect(open.describe()).toEqual([`edge in us-east; eu-west RTT 70 ms, ap-south RTT 190 ms (delaying relays on ${LOCAL.host})`])
    const withUrls = { ...opts, nodeUrls: Object.fromEntries(open.links.map((l) => [l.nodeId, l.relay.url])) }
    const euWest = nodes.find((n) => n.id === 'local-eu-west')!
    expect(nodeEnv(withUrls, euWest).PUBLIC_URL).toBe(open.links[0]!.relay.url)
    expect(nodeEnv(withUrls, nodes[0]!).PUBLIC_URL).toBe(`http://${LOCAL.host}:${nodes[0]!.port}`)
    const table = JSON.parse(edgeEnv(withUrls).GPU_NODES!) as Array<{ id: string; url: string }>
    expect(table.find((n) => n.id === 'local-ap-south')!.url).toBe(open.links[2]!.relay.url)
  })

  it('starts none without a WAN', async () => {
    open = await startWanLinks(undefined, stackNodes(base), LOCAL.host)
    expect(open.links).toEqual([])
    expect(open.describe()).toEqual([])
  })
})
