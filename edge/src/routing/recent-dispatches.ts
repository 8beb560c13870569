/**
 * The requests this isolate has sent to each node, so a node's load can be read as it is now
 * rather than as its last heartbeat saw it. A heartbeat is up to a second old and the edge caches
 * the table for another second: without this, a burst that arrives within that time sees every
 * node idle, and a conversation's next turn sees its node still busy with the turns that just
 * ended — a rule that moves conversations off busy nodes would then move them all at once.
 *
 * A node's load = its heartbeat's `running + waiting` (at `ts`) corrected by what this isolate
 * knows happened since (`sinceHeartbeat`): + its open requests started at or after `ts` (the
 * heartbeat has not seen them), − its requests that were open at `ts` and have ended since (the
 * heartbeat still counts them). For a static node (no heartbeat) every open request counts.
 * Ended requests are kept only until a heartbeat after their end (or HEARTBEAT_GONE_MS); the
 * count for a node's current heartbeat is kept up to date as requests end, so reading it costs a
 * pass over the node's open requests only. Plain data only, shared by the requests of an isolate
 * (safe on Workers).
 */
import { NODE_FRESH_MS } from '../../../shared/src/node-row.ts'

/** Longer than any request is allowed to run (REQUEST_TIMEOUT_MS' default): a lost entry's lifetime. */
export const MAX_OPEN_MS = 10 * 60_000
/** An ended request older than this is in no fresh heartbeat's count any more. */
const HEARTBEAT_GONE_MS = NODE_FRESH_MS
/** Ended requests kept per node at most (at thousands a second, the oldest are dropped: the load then reads a little high). */
export const MAX_ENDED = 4096

export interface Dispatch {
  /** The request went to another node instead (a failover): count it there, from its start. */
  moveTo(nodeId: string): void
  /** The response ended: stop counting it (idempotent). */
  end(): void
}

interface Ended {
  startedAtMs: number
  endedAtMs: number
}

/** One node's requests: open ones, and ended ones a heartbeat may still count. */
class NodeDispatches {
  readonly open = new Set<{ atMs: number }>()
  /** In order of their end, from `head` on (the ones before it are gone). */
  private ended: Ended[] = []
  private head = 0
  /** The heartbeat `endedBefore` counts for, and its count: ended requests that were open at it. */
  private ts: number | undefined
  private endedBefore = 0

  end(startedAtMs: number, endedAtMs: number): void {
    this.ended.push({ startedAtMs, endedAtMs })
    if (this.ts !== undefined && startedAtMs < this.ts && endedAtMs >= this.ts) this.endedBefore++
    this.drop(endedAtMs - HEARTBEAT_GONE_MS)
  }

  /** Ended since `ts` (a heartbeat's), having started before it. */
  endedSince(ts: number, nowMs: number): number {
    if (ts !== this.ts) {
      // Heartbeats only move forward: what ended before this one is in no count again.
      this.drop(Math.max(ts, nowMs - HEARTBEAT_GONE_MS))
      this.ts = ts
      this.endedBefore = 0
      for (let i = this.head; i < this.ended.length; i++) {
        const e = this.ended[i]!
        if (e.startedAtMs < ts && e.endedAtMs >= ts) this.endedBefore++
      }
    }
    return this.endedBefore
  }

  get idle(): boolean {
    return this.open.size === 0 && this.head === this.ended.length
  }

  /** Forgets the requests that ended before `beforeMs`, and the oldest past MAX_ENDED. */
  private drop(beforeMs: number): void {
    while (this.head < this.ended.length && (this.ended[this.head]!.endedAtMs < beforeMs || this.ended.length - this.head > MAX_ENDED)) {
      const e = this.ended[this.head++]!
      if (this.ts !== undefined && e.startedAtMs < this.ts && e.endedAtMs >= this.ts) this.endedBefore--
    }
    if (this.head > 64 && this.head * 2 > this.ended.length) {
      this.ended = this.ended.slice(this.head)
      this.head = 0
    }
  }
}

export class RecentDispatches {
  private readonly nodes = new Map<string, NodeDispatches>()

  constructor(private readonly now: () => number = Date.now) {}

  begin(nodeId: string): Dispatch {
    const entry = { atMs: this.now() }
    let node = nodeId
    let ended = false
    this.of(node).open.add(entry)
    return {
      moveTo: (to) => {
        if (ended || to === node) return
        this.nodes.get(node)?.open.delete(entry)
        node = to
        this.of(node).open.add(entry)
      },
      end: () => {
        if (ended) return
        ended = true
        const n = this.nodes.get(node)
        if (n?.open.delete(entry)) n.end(entry.atMs, this.now())
      },
    }
  }

  /**
   * How far the node's load now differs from its heartbeat's at `ts` (undefined: a static node,
   * every open request): open requests started at or after `ts`, less requests open at `ts` that
   * have ended since. Add it to the heartbeat's `running + waiting`.
   */
  sinceHeartbeat(nodeId: string, ts: number | undefined): number {
    const n = this.nodes.get(nodeId)
    if (!n) return 0
    const t = this.now()
    const oldest = t - MAX_OPEN_MS
    let started = 0
    for (const e of n.open) {
      if (e.atMs < oldest) n.open.delete(e)
      else if (ts === undefined || e.atMs >= ts) started++
    }
    const delta = ts === undefined ? started : started - n.endedSince(ts, t)
    if (n.idle) this.nodes.delete(nodeId)
    return delta
  }

  private of(nodeId: string): NodeDispatches {
    let n = this.nodes.get(nodeId)
    if (!n) this.nodes.set(nodeId, (n = new NodeDispatches()))
    return n
  }
}
