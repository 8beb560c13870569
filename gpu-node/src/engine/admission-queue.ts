/** What the queue orders by: lower priority first, then earlier arrival. */
export interface Queued {
  priority: number
  arrivalSeq: number
}

/**
 * The bounded waiting line in front of the scheduler. Ordered by (priority, arrival); a
 * preempted sequence keeps its arrival number, so it goes back ahead of later arrivals.
 * `capacity` bounds only new admissions (`offer`); re-queued preempted work is always taken.
 */
export class AdmissionQueue<T extends Queued> {
  private readonly items: T[] = []

  constructor(readonly capacity: number) {}

  get length(): number {
    return this.items.length
  }

  /** Adds a new arrival; false when the queue is full. */
  offer(item: T): boolean {
    if (this.items.length >= this.capacity) return false
    this.insert(item)
    return true
  }

  /** Puts preempted work back in its place, regardless of capacity. */
  requeue(item: T): void {
    this.insert(item)
  }

  /** How many waiting items have a priority better (lower) than `priority`. */
  before(priority: number): number {
    return this.countWhile((m) => m.priority < priority)
  }

  peek(): T | undefined {
    return this.items[0]
  }

  shift(): T | undefined {
    return this.items.shift()
  }

  remove(item: T): boolean {
    const i = this.items.indexOf(item)
    if (i === -1) return false
    this.items.splice(i, 1)
    return true
  }

  [Symbol.iterator](): Iterator<T> {
    return this.items[Symbol.iterator]()
  }

  private insert(item: T): void {
    // Before the first element that should run after `item`.
    const at = this.countWhile((m) => m.priority < item.priority || (m.priority === item.priority && m.arrivalSeq < item.arrivalSeq))
    this.items.splice(at, 0, item)
  }

  /** How many items, from the front, satisfy `runsFirst` (binary search: the queue's order makes it a prefix). */
  private countWhile(runsFirst: (m: T) => boolean): number {
    let lo = 0
    let hi = this.items.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (runsFirst(this.items[mid]!)) lo = mid + 1
      else hi = mid
    }
    return lo
  }
}
