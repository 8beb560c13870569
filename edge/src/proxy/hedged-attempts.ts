/**
 * The attempts of one request on its ranked nodes, hedged: a node that has not answered within
 * `hedgeAfterMs` is not given up — the next node is asked beside it, and whichever answers first
 * is taken. A failure (refused, overloaded, broken) moves on to the next node at once.
 *
 * Why not give up on a slow node (as forward.ts did): a node that does not answer in time is most
 * often slow for a moment — its connection stalled, its process starved of CPU — and answers soon
 * after. Measured on a 3-region simulation after a region's node was killed: requests that
 * reached a healthy node 2 s late (just when the edge gave up on them) were answered there in
 * ~120 ms, while the edge, asking the next node from scratch with a new full timeout, answered
 * 503 `overloaded` at 4.0 s with two healthy regions up. Hedged, such a request is answered by
 * whichever node comes first, within the same bound.
 *
 * Bounds: attempt i of n starts at the latest `i × hedgeAfterMs` after the first (earlier when one
 * before it failed) and may wait for its headers `(n − i) × hedgeAfterMs`, so every attempt
 * started on schedule ends by the same deadline — `n × hedgeAfterMs`, what n timeouts one after
 * another took before. Without `hedgeAfterMs` (JSON answers, whose headers come with the whole
 * completion) attempts run one at a time, each bounded by `timeoutMs`.
 */

/** One attempt's end, as forward.ts's `send` reports it. */
export interface Settled<N, A> {
  node: N
  attempt: A
}

export interface HedgedAttemptsOptions<N, A> {
  nodes: readonly N[]
  /** Sends to `node`, waiting at most `headersTimeoutMs` for its headers; never rejects but for the client leaving. */
  send(node: N, headersTimeoutMs: number): Promise<A>
  /** Ask the next node beside a silent one after this long (streams); undefined: one at a time. */
  hedgeAfterMs?: number
  /** Each attempt's own bound when not hedged. */
  timeoutMs: number
  /** An attempt that settles after another was taken (`abandon`): its answer is to be dropped, its failure accounted. */
  settledLate(settled: Settled<N, A>): void
  now: () => number
}

interface Running<N, A> {
  node: N
  /** Start order, from 0. */
  index: number
  done: Promise<Settled<N, A> & { running: Running<N, A> }>
}

export class HedgedAttempts<N, A> {
  private next = 0
  private lastStartMs = 0
  private lastSettledIndex = -1
  private readonly running = new Set<Running<N, A>>()

  constructor(private readonly opts: HedgedAttemptsOptions<N, A>) {}

  /** Attempts started so far. */
  get started(): number {
    return this.next
  }

  /**
   * The next attempt to settle, starting attempts as the rule says; undefined when every node was
   * tried and none is still running.
   */
  async settle(): Promise<Settled<N, A> | undefined> {
    if (this.running.size === 0 && !this.startNext()) return undefined
    for (;;) {
      const hedgeIn = this.hedgeDelayMs()
      let timer: ReturnType<typeof setTimeout> | undefined
      const hedge = hedgeIn === undefined ? undefined : new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), hedgeIn)))
      const first = await Promise.race(hedge ? [...this.dones(), hedge] : this.dones())
      clearTimeout(timer)
      if (first === undefined) {
        this.startNext()
        continue
      }
      this.running.delete(first.running)
      this.lastSettledIndex = first.running.index
      return { node: first.node, attempt: first.attempt }
    }
  }

  /**
   * Attempts started before the one settle() reported last that are still running: nodes an
   * answer from a later one overtook (counted like failed ones in x-zl-failover).
   */
  overtaken(): number {
    let n = 0
    for (const r of this.running) if (r.index < this.lastSettledIndex) n++
    return n
  }

  /** After a failed attempt: its turn passes to the next node at once (when one is left). */
  moveOn(): void {
    this.startNext()
  }

  /** An answer was taken: the attempts still running are left to settle on their own (`settledLate`). */
  abandon(): void {
    for (const r of this.running) void r.done.then(({ node, attempt }) => this.opts.settledLate({ node, attempt }), () => {})
    this.running.clear()
  }

  private dones(): Array<Running<N, A>['done']> {
    return [...this.running].map((r) => r.done)
  }

  /** Until the next hedge, or undefined when there is none to start. */
  private hedgeDelayMs(): number | undefined {
    if (this.opts.hedgeAfterMs === undefined || this.next >= this.opts.nodes.length) return undefined
    return Math.max(0, this.lastStartMs + this.opts.hedgeAfterMs - this.opts.now())
  }

  private startNext(): boolean {
    const { nodes, hedgeAfterMs } = this.opts
    if (this.next >= nodes.length) return false
    const node = nodes[this.next]!
    const timeoutMs = hedgeAfterMs === undefined ? this.opts.timeoutMs : (nodes.length - this.next) * hedgeAfterMs
    this.next++
    this.lastStartMs = this.opts.now()
    const running = { node, index: this.next - 1 } as Running<N, A>
    running.done = this.opts.send(node, timeoutMs).then((attempt) => ({ node, attempt, running }))
    // The client leaving rejects every running attempt; settle() reports the first, the rest are handled here.
    running.done.catch(() => {})
    this.running.add(running)
    return true
  }
}
