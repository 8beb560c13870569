import { describe, expect, it } from 'vitest'
import { estimateQueueWaitMs, FRESH_MS, greatCircleKm, pickNodes, type RoutableNode } from './pick-node.ts'

const NOW = 1_800_000_000_000
const US_EAST = { lat: 39.0, lon: -77.5 }
const EU_WEST = { lat: 53.3, lon: -6.3 }
const AP_SOUTH = { lat: 19.1, lon: 72.9 }

function node(id: string, at: { lat: number; lon: number }, extra: Partial<RoutableNode> = {}): RoutableNode {
  return { id, url: `http://${id}.test`, region: id, ...at, models: ['tiny'], maxBatch: 32, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 1000, draining: false, ts: NOW - 1000, source: 'registry', ...extra }
}

const fleet = [node('us-east', US_EAST), node('eu-west', EU_WEST), node('ap-south', AP_SOUTH)]
const ids = (nodes: RoutableNode[]) => nodes.map((n) => n.id)

describe('pickNodes', () => {
  it('ranks the nearest region first for clients near each of the three regions', () => {
    expect(ids(pickNodes(fleet, 'tiny', { lat: 40.7, lon: -74.0 }, NOW))).toEqual(['us-east', 'eu-west', 'ap-south']) // New York
    expect(ids(pickNodes(fleet, 'tiny', { lat: 51.5, lon: -0.1 }, NOW))).toEqual(['eu-west', 'us-east', 'ap-south']) // London
    expect(ids(pickNodes(fleet, 'tiny', { lat: 12.97, lon: 77.59 }, NOW))).toEqual(['ap-south', 'eu-west', 'us-east']) // Bangalore
  })

  it('excludes stale, draining, marked-down and other-model nodes', () => {
    const nodes = [
      node('stale', US_EAST, { ts: NOW - FRESH_MS }),
      node('draining', US_EAST, { draining: true }),
      node('down', US_EAST, { downUntilMs: NOW + 1 }),
      node('other', US_EAST, { models: ['big'] }),
      node('recovered', US_EAST, { downUntilMs: NOW }),
      node('far', AP_SOUTH),
    ]
    expect(ids(pickNodes(nodes, 'tiny', US_EAST, NOW))).toEqual(['recovered', 'far'])
  })

  it('treats static nodes as always fresh and serving any model when they list none', () => {
    const s = node('static', EU_WEST, { ts: undefined, models: undefined, source: 'static' })
    expect(ids(pickNodes([s], 'anything', US_EAST, NOW))).toEqual(['static'])
  })

  it('prefers a farther node when the near one has a long queue', () => {
    const busy = node('us-east', US_EAST, { waiting: 40, tokPerSec: 500 }) // ~10 s of queue
    expect(ids(pickNodes([busy, node('eu-west', EU_WEST)], 'tiny', US_EAST, NOW))).toEqual(['eu-west', 'us-east'])
  })

  it('gives a near-tie to the nearer node', () => {
    // 300 km apart (~3 ms of RTT); the nearer one has a little queue that makes it ~2 ms "worse".
    const client = { lat: 50.0, lon: 8.0 }
    const nearer = node('near', { lat: 50.0, lon: 8.5 }, { waiting: 1, tokPerSec: 128_000 / 5 }) // +5 ms
    const farther = node('far', { lat: 50.0, lon: 12.0 })
    const [a, b] = pickNodes([farther, nearer], 'tiny', client, NOW)
    expect(a!.costMs).toBeGreaterThan(b!.costMs)
    expect(a!.id).toBe('near')
  })

  it('is pure: the same inputs give the same ranking and the input is untouched', () => {
    const copy = structuredClone(fleet)
    expect(pickNodes(fleet, 'tiny', EU_WEST, NOW)).toEqual(pickNodes(fleet, 'tiny', EU_WEST, NOW))
    expect(fleet).toEqual(copy)
  })
})

describe('estimates', () => {
  it('measures great-circle distance in km', () => {
    expect(greatCircleKm(US_EAST, US_EAST)).toBe(0)
    expect(greatCircleKm(US_EAST, EU_WEST)).toBeGreaterThan(5300)
    expect(greatCircleKm(US_EAST, EU_WEST)).toBeLessThan(5700)
  })

  it('turns waiting requests into milliseconds of queue', () => {
    expect(estimateQueueWaitMs({ waiting: 0, tokPerSec: 0 })).toBe(0)
    expect(estimateQueueWaitMs({ waiting: 2, tokPerSec: 256 })).toBe(1000)
    expect(estimateQueueWaitMs({ waiting: 3, tokPerSec: 0 })).toBe(300)
  })
})
