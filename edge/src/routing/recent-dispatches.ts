/**
 * The requests this isolate has sent to each node and that are still open, so a node's load
 * can count what its heartbeat has not seen yet. A heartbeat is up to a second old and the edge
 * caches the table for another second: without this, a burst that arrives within that time sees
 * every node idle, and the bounded-load walk (bounded-load.ts) would send all of a hot key's
 * requests to its home node.
 *
 * A node's unseen load = this isolate's open requests to it that started at or after the
 * heartbeat's `ts` (those started before are in its `running`/`waiting` already); for a static
 * node (no heartbeat) every open request. Entries are removed when the response ends, and any
 * left behind (a body that never settled) lapse after MAX_OPEN_MS. Plain data only, shared by
 * the requests of an isolate (safe on Workers).
 */

/** Longer than any request is allowed to run (REQUEST_TIMEOUT_MS' default): a lost entry's lifetime. */
export const MAX_OPEN_MS = 10 * 60_000

export interface Dispatch {
  /** The request went to another node instead (a failover): count it there, from its start. */
  moveTo(nodeId: string): void
  /** The response ended: stop counting it (idempotent). */
  end(): void
}

export class RecentDispatches {
  private readonly open = new Map<string, Set<{ atMs: number }>>()

  constructor(private readonly now: () => number = Date.now) {}

  begin(nodeId: string): Dispatch {
    const entry = { atMs: this.now() }
    let node = nodeId
    let ended = false
    this.add(node, entry)
    return {
      moveTo: (to) => {
        if (ended || to === node) return
        this.remove(node, entry)
        node = to
        this.add(node, entry)
      },
      end: () => {
        if (ended) return
        ended = true
        this.remove(node, entry)
      },
    }
  }

  /** Open requests to `nodeId` started at or after `sinceMs` (every open one when undefined). */
  unseen(nodeId: string, sinceMs: number | undefined): number {
    const entries = this.open.get(nodeId)
    if (!entries) return 0
    const oldest = this.now() - MAX_OPEN_MS
    let n = 0
    for (const e of entries) {
      if (e.atMs < oldest) entries.delete(e)
      else if (sinceMs === undefined || e.atMs >= sinceMs) n++
    }
    if (entries.size === 0) this.open.delete(nodeId)
    return n
  }

  private add(nodeId: string, entry: { atMs: number }): void {
    let entries = this.open.get(nodeId)
    if (!entries) this.open.set(nodeId, (entries = new Set()))
    entries.add(entry)
  }

  private remove(nodeId: string, entry: { atMs: number }): void {
    const entries = this.open.get(nodeId)
    if (!entries) return
    entries.delete(entry)
    if (entries.size === 0) this.open.delete(nodeId)
  }
}
