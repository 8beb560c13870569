/**
 * Where each supersede group's newest request runs (shared/src/supersede.ts), across edges and
 * isolates: Redis `zl:sup:<hash of tenant and key>` = "<node id> <edge time>", kept for TTL_MS.
 * A node ends its own older requests of a group when a newer one arrives; a group whose requests
 * land on different nodes (a load bound, a failover, another edge) is told apart here. After a
 * request is admitted, its edge records it: the script keeps the newer of the two records, and
 * the edge learns which node must hear of it:
 * - the record named an older request on another node: that node supersedes before this one;
 * - the record named a newer request on another node (this one was slower to arrive): this
 *   request's own node supersedes before that one.
 * Writes run in the background; a lost write loses only the cross-node notice.
 */
import { KeyHash } from './key-hash.ts'

export interface SupersedeRedis {
  eval(script: string, keys: string[], args: unknown[]): Promise<unknown>
}

/** Long enough for any request of a group to finish; an editor's session outlives it by re-recording. */
export const TTL_MS = 10 * 60_000

/** A node that must supersede its requests of the group received before `before`. */
export interface LedgerNotice {
  node: string
  before: number
}

// Keeps the newer record; returns the one it found.
const RECORD = `
local prev = redis.call('GET', KEYS[1])
if prev then
  local at = tonumber(string.match(prev, ' (%S+)$'))
  if at and at > tonumber(ARGV[2]) then return prev end
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return prev
`

export interface SupersedeLedger {
  /** Records that `node` runs the group's request the edge received at `at`; the notice to send, if any. */
  record(tenant: string, key: string, node: string, at: number): Promise<LedgerNotice | undefined>
}

export function createSupersedeLedger(redis: SupersedeRedis): SupersedeLedger {
  return {
    async record(tenant, key, node, at) {
      const found = await redis.eval(RECORD, [ledgerKey(tenant, key)], [node, at, TTL_MS])
      return noticeFor(typeof found === 'string' ? found : undefined, node, at)
    },
  }
}

/** What the record found before this request's means for the nodes (see the file comment). */
export function noticeFor(found: string | undefined, node: string, at: number): LedgerNotice | undefined {
  const space = found?.lastIndexOf(' ') ?? -1
  if (found === undefined || space <= 0) return undefined
  const other = found.slice(0, space)
  const otherAt = Number(found.slice(space + 1))
  if (other === node || !Number.isFinite(otherAt)) return undefined
  return otherAt > at ? { node, before: otherAt } : { node: other, before: at }
}

export function ledgerKey(tenant: string, key: string): string {
  return `zl:sup:${new KeyHash().field('zl-sup-1').field(tenant).field(key).hex()}`
}
