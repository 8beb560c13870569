/**
 * A consistent-hash ring over a region's node ids (Karger et al.; the layout of ketama and
 * HAProxy's `hash-type consistent`): each node owns POINTS_PER_NODE pseudo-random points on a
 * 32-bit circle, and a key belongs to the first point clockwise from its own. A node joining or
 * leaving moves only the keys of the arcs it gains or loses — about 1/N of them — so the turns
 * of a conversation keep landing where its prefix is cached while the fleet changes around it.
 *
 * The walk returns every node in the order the circle meets them, so a caller can skip nodes
 * (over the load bound: bounded-load.ts) and still agree with every other edge on the order:
 * the ring depends only on the set of ids, never on this isolate's history.
 */
import { KeyHash } from './key-hash.ts'

/** Points per node: enough that each node's share of keys is within ~10–15% of fair (ketama uses 160). */
export const POINTS_PER_NODE = 128

export class HashRing {
  readonly ids: readonly string[]
  /** Sorted points, and the index (into ids) of each point's owner. */
  private readonly points: Uint32Array
  private readonly owners: Uint16Array

  constructor(ids: readonly string[], pointsPerNode = POINTS_PER_NODE) {
    // Sorted, so the same set given in any order builds the same ring (ties between points too).
    this.ids = [...new Set(ids)].sort()
    const entries: Array<{ point: number; owner: number }> = []
    this.ids.forEach((id, owner) => {
      for (let i = 0; i < pointsPerNode; i++) entries.push({ point: new KeyHash().field(id).text(`#${i}`).point(), owner })
    })
    entries.sort((a, b) => a.point - b.point || a.owner - b.owner)
    this.points = Uint32Array.from(entries, (e) => e.point)
    this.owners = Uint16Array.from(entries, (e) => e.owner)
  }

  /** Every node id once, in the order a clockwise walk from `point` meets them. */
  walk(point: number): string[] {
    const n = this.points.length
    const out: string[] = []
    if (n === 0) return out
    const seen = new Uint8Array(this.ids.length)
    for (let k = 0, i = this.firstAtOrAfter(point >>> 0); k < n && out.length < this.ids.length; k++, i = (i + 1) % n) {
      const owner = this.owners[i]!
      if (seen[owner]) continue
      seen[owner] = 1
      out.push(this.ids[owner]!)
    }
    return out
  }

  /** Binary search: the first point ≥ `point`, wrapping to 0 past the last. */
  private firstAtOrAfter(point: number): number {
    let lo = 0
    let hi = this.points.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.points[mid]! < point) lo = mid + 1
      else hi = mid
    }
    return lo === this.points.length ? 0 : lo
  }
}

/**
 * Rings are built once per distinct set of node ids and kept (a region's set changes only when
 * a node joins, leaves, drains or is marked down), so a request pays for a walk, not a build.
 * Plain data shared by requests: nothing in it waits on I/O (safe on Workers).
 */
const rings = new Map<string, HashRing>()
const MAX_RINGS = 64

export function ringFor(ids: readonly string[]): HashRing {
  const name = [...ids].sort().join('\n')
  let ring = rings.get(name)
  if (!ring) {
    if (rings.size >= MAX_RINGS) rings.clear()
    ring = new HashRing(ids)
    rings.set(name, ring)
  }
  return ring
}

/** `nodes` in the ring order of `point` (each node once). */
export function ringOrder<N extends { id: string }>(nodes: readonly N[], point: number): N[] {
  const byId = new Map(nodes.map((n) => [n.id, n]))
  return ringFor([...byId.keys()]).walk(point).map((id) => byId.get(id)!)
}
