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
    const busy = node('us-east', US_EAST, { running: 32, waiting: 40, tokPerSec: 500 }) // batch full: ~10 s of queue
    expect(ids(pickNodes([busy, node('eu-west', EU_WEST)], 'tiny', US_EAST, NOW))).toEqual(['eu-west', 'us-east'])
  })

  it('gives a near-tie to the nearer node', () => {
    // 300 km apart (~3 ms of RTT); the nearer one has a little queue that makes it ~2 ms "worse".
    const client = { lat: 50.0, lon: 8.0 }
    const nearer = node('near', { lat: 50.0, lon: 8.5 }, { running: 32, waiting: 1, tokPerSec: 128_000 / 5 }) // batch full: +5 ms
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
    const none = { running: 0, maxBatch: 0 } // a static entry: no batch size known, every waiting request blocked
    expect(estimateQueueWaitMs({ ...none, waiting: 0, tokPerSec: 0 })).toBe(0)
    expect(estimateQueueWaitMs({ ...none, waiting: 2, tokPerSec: 256 })).toBe(1000)
    expect(estimateQueueWaitMs({ ...none, waiting: 3, tokPerSec: 0 })).toBe(300)
  })

  it('prices waiting requests that fit the free batch slots at their prefill, less the row\'s age', () => {
    // 8 waiting behind the prefill chunk, 31 slots free: 8 × 128 prompt tokens at 20k tok/s = 51.2 ms.
    const burst = { running: 1, waiting: 8, maxBatch: 32, tokPerSec: 20, prefillTokPerSec: 20_000 }
    expect(estimateQueueWaitMs(burst)).toBeCloseTo(51.2)
    expect(estimateQueueWaitMs(burst, 50)).toBeCloseTo(1.2)
    expect(estimateQueueWaitMs(burst, 1000)).toBe(0)
    expect(estimateQueueWaitMs({ ...burst, prefillTokPerSec: undefined })).toBeCloseTo(102.4) // DEFAULT_PREFILL_TOK_PER_SEC
  })

  it('prices requests beyond the free slots at the generated tokens/s, however old the row', () => {
    // 30 of 32 running: 2 of the 8 are admitted (12.8 ms of prefill), 6 wait for slots: 6 × 128 / 256 tok/s = 3 s.
    const full = { running: 30, waiting: 8, maxBatch: 32, tokPerSec: 256, prefillTokPerSec: 20_000 }
    expect(estimateQueueWaitMs(full)).toBeCloseTo(3012.8)
    expect(estimateQueueWaitMs(full, 2000)).toBeCloseTo(3000)
  })
})

describe('failover (us-east down, RTT us-east↔eu-west 70 ms, ↔ap-south 190 ms)', () => {
  const down = node('us-east', US_EAST, { downUntilMs: NOW + 10_000 })
  const farIdle = node('ap-south', AP_SOUTH, { tokPerSec: 0 })

  it('sends us-east clients to eu-west while its burst of failover traffic is being admitted', () => {
    // What eu-west publishes right after us-east's load moved to it: one prompt prefilling, the
    // rest queued behind the prefill chunk, almost nothing generated yet.
    const taking = node('eu-west', EU_WEST, { running: 1, waiting: 8, maxBatch: 32, tokPerSec: 20, prefillTokPerSec: 20_000, ts: NOW - 200 })
    expect(ids(pickNodes([down, taking, farIdle], 'tiny', US_EAST, NOW))).toEqual(['eu-west', 'ap-south'])
  })

  it('the control: sends them to ap-south once eu-west\'s batch is really full', () => {
    const full = node('eu-west', EU_WEST, { running: 32, waiting: 8, maxBatch: 32, tokPerSec: 3000, prefillTokPerSec: 20_000, ts: NOW - 200 })
    expect(ids(pickNodes([down, full, farIdle], 'tiny', US_EAST, NOW))).toEqual(['ap-south', 'eu-west'])
  })
})
