import { describe, expect, it } from 'vitest'
import { DEFAULT_PREFILL_TOK_PER_SEC, prefillMs, routeByAffinity, type AffinityOptions, type Placement } from './affinity-route.ts'
import { RecentDispatches } from './recent-dispatches.ts'
import { KeyHash } from './key-hash.ts'
import { ringOrder } from './hash-ring.ts'
import { FRESH_MS, pickNodes, type RankedNode, type RoutableNode } from './pick-node.ts'

const NOW = 1_800_000_000_000
const US_EAST = { lat: 39.0, lon: -77.5 }
const EU_WEST = { lat: 53.3, lon: -6.3 }
const NEW_YORK = { lat: 40.7, lon: -74.0 }

function node(id: string, region: string, at: { lat: number; lon: number }, extra: Partial<RoutableNode> = {}): RoutableNode {
  return { id, url: `http://${id}.test`, region, ...at, models: ['tiny'], maxBatch: 32, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 1000, draining: false, ts: NOW - 500, source: 'registry', ...extra }
}

const fleet = (extra: Record<string, Partial<RoutableNode>> = {}) => [
  node('use-1', 'us-east', US_EAST, extra['use-1']),
  node('use-2', 'us-east', US_EAST, extra['use-2']),
  node('euw-1', 'eu-west', EU_WEST, extra['euw-1']),
  node('euw-2', 'eu-west', EU_WEST, extra['euw-2']),
]
const rank = (nodes: RoutableNode[], client = NEW_YORK) => pickNodes(nodes, 'tiny', client, NOW)
const point = (s: string) => new KeyHash().text(s).point()
const opts = (promptTokens: number, loads: Record<string, number> = {}): AffinityOptions => ({
  balanceFactor: 1.25,
  promptTokens,
  loadOf: (n: RankedNode) => n.running + n.waiting + (loads[n.id] ?? 0),
})
const at = (region: string, nodeId: string): Placement => ({ region, node: nodeId, atMs: NOW - 60_000 })
/** The chosen node and the reason. */
const chosen = (route: ReturnType<typeof routeByAffinity>) => ({ reason: route.reason, id: route.nodes[0]?.id })

describe('routeByAffinity within a region', () => {
  it('sends a key seen nowhere yet to its ring home in the best region (hit), and different keys over both nodes', () => {
    const ranked = rank(fleet())
    const homes = new Set<string>()
    for (let i = 0; i < 32; i++) {
      const k = point(`conversation ${i}`)
      const route = routeByAffinity(ranked, k, undefined, opts(500))
      expect(route.reason).toBe('hit')
      expect(route.nodes[0]!.id).toBe(ringOrder(ranked.filter((n) => n.region === 'us-east'), k)[0]!.id)
      homes.add(route.nodes[0]!.id)
    }
    expect(homes).toEqual(new Set(['use-1', 'use-2']))
  })

  it('keeps a conversation on the node it was last served by, even off its ring home', () => {
    const ranked = rank(fleet())
    const k = point('conversation 1')
    const [home, other] = ringOrder(ranked.filter((n) => n.region === 'us-east'), k)
    expect(other!.id).not.toBe(home!.id)
    expect(chosen(routeByAffinity(ranked, k, at('us-east', other!.id), opts(500)))).toEqual({ reason: 'hit', id: other!.id })
  })

  it('spreads off a node above c × the mean load, to the next node of the ring', () => {
    const k = point('conversation 1')
    const [home, next] = ringOrder(rank(fleet()).filter((n) => n.region === 'us-east'), k)
    const ranked = rank(fleet({ [home!.id]: { running: 12 }, [next!.id]: { running: 4 } }))
    expect(chosen(routeByAffinity(ranked, k, undefined, opts(500)))).toEqual({ reason: 'spread', id: next!.id })
    expect(chosen(routeByAffinity(ranked, k, at('us-east', home!.id), opts(500)))).toEqual({ reason: 'spread', id: next!.id })
    // Load this isolate sent since the heartbeat counts as much as the heartbeat's own.
    const quiet = rank(fleet())
    expect(chosen(routeByAffinity(quiet, k, undefined, opts(500, { [home!.id]: 12, [next!.id]: 4 })))).toEqual({ reason: 'spread', id: next!.id })
  })

  it('never prefers a remembered node that is draining, stale, marked down or lacks the model', () => {
    const k = point('conversation 1')
    for (const gone of [{ draining: true }, { ts: NOW - FRESH_MS }, { downUntilMs: NOW + 5000 }, { models: ['other'] }]) {
      const ranked = rank(fleet({ 'use-1': gone }))
      const route = routeByAffinity(ranked, k, at('us-east', 'use-1'), opts(500))
      expect(route.reason).toBe('moved')
      expect(route.nodes[0]!.id).toBe('use-2')
      expect(route.nodes.map((n) => n.id)).not.toContain('use-1')
    }
  })

  it('lists the chosen node first, then the rest of the ranking for failover', () => {
    const ranked = rank(fleet())
    const route = routeByAffinity(ranked, point('k'), at('us-east', 'use-2'), opts(500))
    expect(route.nodes.map((n) => n.id)).toEqual(['use-2', ...ranked.map((n) => n.id).filter((id) => id !== 'use-2')])
    expect(routeByAffinity([], point('k'), undefined, opts(500))).toEqual({ nodes: [], reason: 'none' })
  })
})

describe('routeByAffinity within a region: new keys to the least-loaded node', () => {
  it('places a new conversation on the least-loaded node when its ring home is busier (spread), on its home at equal loads (hit)', () => {
    const ranked = rank(fleet())
    const k = point('conversation 1')
    const [home, other] = ringOrder(ranked.filter((n) => n.region === 'us-east'), k)
    expect(chosen(routeByAffinity(ranked, k, undefined, opts(500, { [home!.id]: 1 })))).toEqual({ reason: 'spread', id: other!.id })
    expect(chosen(routeByAffinity(ranked, k, undefined, opts(500, { [home!.id]: 2, [other!.id]: 2 })))).toEqual({ reason: 'hit', id: home!.id })
  })

  it('keeps a hot key (many requests in flight on one key) under ⌈c·m/n⌉ per node: 64 over 2 nodes at most-loaded ÷ mean ≤ 1.5', () => {
    for (const [count, c, m] of [[2, 1.25, 64], [3, 1.25, 120], [5, 1.25, 120], [2, 1.5, 120], [5, 1.5, 120]] as const) {
      const ranked = rank(Array.from({ length: count }, (_, i) => node(`n${i}`, 'r', US_EAST)), US_EAST)
      const load = new Map(ranked.map((n) => [n.id, 0]))
      let last: Placement | undefined
      for (let i = 0; i < m; i++) {
        const r = routeByAffinity(ranked, point('one hot system prompt'), last, { balanceFactor: c, promptTokens: 500, loadOf: (n) => load.get(n.id)! })
        const id = r.nodes[0]!.id
        load.set(id, load.get(id)! + 1)
        last = { region: 'r', node: id, atMs: NOW }
      }
      expect(Math.max(...load.values())).toBeLessThanOrEqual(Math.ceil((c * m) / count))
      expect(Math.max(...load.values()) / (m / count)).toBeLessThanOrEqual(1.5)
    }
  })

  it('splits a burst of new conversations evenly, and keeps each on its node turn after turn, with the load read through this isolate\'s requests', () => {
    const t = NOW
    const ranked = rank([node('a', 'r', US_EAST, { ts: t - 200 }), node('b', 'r', US_EAST, { ts: t - 200 }), node('c', 'r', US_EAST, { ts: t - 200 })], US_EAST)
    const sent = new RecentDispatches(() => t)
    const place = (i: number, last?: Placement) =>
      routeByAffinity(ranked, point(`burst ${i}`), last, { balanceFactor: 1.25, promptTokens: 800, loadOf: (n) => Math.max(0, n.running + n.waiting + sent.sinceHeartbeat(n.id, n.ts)) })
    const first = Array.from({ length: 12 }, (_, i) => {
      const id = place(i).nodes[0]!.id
      return { id, dispatch: sent.begin(id) }
    })
    const count = (ids: string[]) => ids.reduce<Record<string, number>>((m, id) => ({ ...m, [id]: (m[id] ?? 0) + 1 }), {})
    expect(count(first.map((f) => f.id))).toEqual({ a: 4, b: 4, c: 4 })
    // Every first turn ends; the second turns come one after another, each where its first was.
    for (const f of first) f.dispatch.end()
    const second = first.map((f, i) => {
      const route = place(i, { region: 'r', node: f.id, atMs: t })
      sent.begin(route.nodes[0]!.id)
      return route
    })
    expect(second.map((r) => r.nodes[0]!.id)).toEqual(first.map((f) => f.id))
    expect(new Set(second.map((r) => r.reason))).toEqual(new Set(['hit']))
  })
})

describe('routeByAffinity across regions', () => {
  // New York → us-east ≈ 330 km, → eu-west ≈ 5100 km: the extra RTT of staying in eu-west ≈ 48 ms.
  const extraMs = (() => {
    const ranked = rank(fleet())
    return ranked.find((n) => n.region === 'eu-west')!.costMs - ranked[0]!.costMs
  })()

  it('keeps a conversation in the region holding its prefix while the extra RTT is below the prefill it saves', () => {
    expect(extraMs).toBeGreaterThan(40)
    expect(extraMs).toBeLessThan(60)
    const tokens = Math.ceil((extraMs * 2 * DEFAULT_PREFILL_TOK_PER_SEC) / 1000) // saves ~2× the detour
    expect(chosen(routeByAffinity(rank(fleet()), point('c'), at('eu-west', 'euw-2'), opts(tokens)))).toEqual({ reason: 'hit', id: 'euw-2' })
  })

  it('moves it to the best region once the extra RTT exceeds the saved prefill', () => {
    const tokens = Math.floor((extraMs * 0.5 * DEFAULT_PREFILL_TOK_PER_SEC) / 1000) // saves half the detour
    const route = routeByAffinity(rank(fleet()), point('c'), at('eu-west', 'euw-2'), opts(tokens))
    expect(route.reason).toBe('moved')
    expect(route.nodes[0]!.region).toBe('us-east')
  })

  it('prices the saved prefill at the would-be node\'s published prefillTokPerSec', () => {
    const tokens = Math.ceil((extraMs * 2 * DEFAULT_PREFILL_TOK_PER_SEC) / 1000)
    // The same prompt, but us-east prefills 10× faster than the default: the repeat costs a fifth of the detour.
    const fast = rank(fleet({ 'use-1': { prefillTokPerSec: 10 * DEFAULT_PREFILL_TOK_PER_SEC }, 'use-2': { prefillTokPerSec: 10 * DEFAULT_PREFILL_TOK_PER_SEC } }))
    expect(routeByAffinity(fast, point('c'), at('eu-west', 'euw-2'), opts(tokens)).reason).toBe('moved')
    expect(prefillMs(2000, { prefillTokPerSec: 4000 })).toBe(500)
    expect(prefillMs(2000, {})).toBe((2000 / DEFAULT_PREFILL_TOK_PER_SEC) * 1000)
  })

  it('counts the remembered region\'s queue wait as part of the cost of staying', () => {
    const tokens = Math.ceil((extraMs * 2 * DEFAULT_PREFILL_TOK_PER_SEC) / 1000)
    // ~50 requests waiting at 1000 tok/s ≈ 6 s of queue in eu-west: far more than the prefill saved.
    const busy = rank(fleet({ 'euw-1': { waiting: 50 }, 'euw-2': { waiting: 50 } }))
    expect(routeByAffinity(busy, point('c'), at('eu-west', 'euw-2'), opts(tokens)).reason).toBe('moved')
  })

  it('moves a conversation whose remembered region has no usable node left', () => {
    const ranked = rank(fleet({ 'euw-1': { draining: true }, 'euw-2': { ts: NOW - FRESH_MS } }))
    const route = routeByAffinity(ranked, point('c'), at('eu-west', 'euw-2'), opts(1_000_000))
    expect(route.reason).toBe('moved')
    expect(route.nodes[0]!.region).toBe('us-east')
  })

  it('moves to the best region when the remembered node drained, though its region has another (the prefix went with the node)', () => {
    const route = routeByAffinity(rank(fleet({ 'euw-2': { draining: true } })), point('c'), at('eu-west', 'euw-2'), opts(1_000_000))
    expect(route.reason).toBe('moved')
    expect(route.nodes[0]!.region).toBe('us-east')
  })

  it('moves when the remembered node is over its region\'s load bound, however much prefill it would save', () => {
    const route = routeByAffinity(rank(fleet({ 'euw-2': { running: 20 } })), point('c'), at('eu-west', 'euw-2'), opts(1_000_000))
    expect(route.reason).toBe('moved')
    expect(route.nodes[0]!.region).toBe('us-east')
  })
})
