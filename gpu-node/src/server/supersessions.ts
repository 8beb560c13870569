/**
 * The node's running requests by supersede group (tenant + x-zl-supersede key): a request that
 * arrives supersedes every request of its group that arrived before it (shared/src/supersede.ts).
 * Order is the edge's receive time (x-zl-supersede-at) where the edge gave one, so a key's
 * requests are ordered the same on every node; else this node's arrival order.
 *
 * A superseded request ends at once: its response gets the dialect's `superseded` error and its
 * engine requests are aborted, so its KV is freed within two steps, as for a client that left.
 */

export interface SupersedeTicket {
  /** How the response ends when it is superseded; runs at once if it already was. */
  onSuperseded(end: () => void): void
  /** The request finished: it leaves its group. */
  leave(): void
}

interface Member {
  at: number
  superseded: boolean
  end?: () => void
}

export class Supersessions {
  private readonly groups = new Map<string, Set<Member>>()
  private clock = 0

  /** Requests running in a group now (tests, metrics). */
  running(tenant: string, key: string): number {
    return this.groups.get(groupOf(tenant, key))?.size ?? 0
  }

  /**
   * A request of (tenant, key) arrives, received by the edge at `at` (epoch ms) when known: the
   * group's older requests are superseded. One older than a request already here is superseded
   * on arrival (it reached this node late).
   */
  arrive(tenant: string, key: string, at?: number): SupersedeTicket {
    const name = groupOf(tenant, key)
    const group = this.groups.get(name) ?? new Set<Member>()
    this.groups.set(name, group)
    // Without an edge time, this node's order: after everything already here.
    const member: Member = { at: at ?? Math.max(Date.now(), this.clock + 1e-3), superseded: false }
    this.clock = Math.max(this.clock, member.at)
    if ([...group].some((m) => m.at > member.at)) member.superseded = true
    else {
      endBefore(group, member.at, true)
      group.add(member)
    }
    return {
      onSuperseded: (end) => {
        if (member.superseded) end()
        else member.end = end
      },
      leave: () => {
        group.delete(member)
        if (group.size === 0 && this.groups.get(name) === group) this.groups.delete(name)
      },
    }
  }

  /**
   * Supersedes the group's requests that the edge received before `before` (another node's newer
   * request: the edge tells this node). Returns how many it ended.
   */
  supersede(tenant: string, key: string, before: number): number {
    const group = this.groups.get(groupOf(tenant, key))
    return group ? endBefore(group, before, false) : 0
  }
}

/** Ends the group's members received before `at` (or at the same time, `orSame`); how many. */
function endBefore(group: Set<Member>, at: number, orSame: boolean): number {
  let ended = 0
  for (const m of group) {
    if (m.at > at || (m.at === at && !orSame)) continue
    m.superseded = true
    group.delete(m)
    ended++
    m.end?.()
  }
  return ended
}

/** A tenant name cannot contain a newline (api-key.ts), so the pair cannot spell another pair. */
const groupOf = (tenant: string, key: string): string => `${tenant}\n${key}`
