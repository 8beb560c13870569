/**
 * Stored responses (OpenAI Responses API `store`), in the Redis the edge and the nodes share.
 * A GPU node writes a response's record as it finishes it (before the terminal event, so a client
 * that continues at once finds it) and reads one to continue it (`previous_response_id`); the
 * edge serves `GET /v1/responses/{id}`, `…/input_items` and `DELETE`.
 *
 * Keys, per tenant (the tenant percent-encoded, so no tenant's keys can spell another's):
 * - `zl:resp:<tenant>:<id>` — JSON `{ response, input }`, `PX` the store's TTL. `input` is the
 *   whole conversation the answer was made from: a continuation's record repeats its chain's
 *   earlier input and output before its own input, so any record continues without the others
 *   (a deleted or expired earlier turn breaks no later one).
 * - `zl:resp-idx:<tenant>` — ZSET of the tenant's ids by write time, and `zl:resp-size:<tenant>` —
 *   HASH id → record bytes plus `#total`: the per-tenant byte bound. A write that takes the
 *   tenant over it deletes the tenant's oldest records first. Both expire with the newest record.
 * One Lua script per write and per delete: the record and its accounting change together.
 */
import { z } from 'zod'
import { redisJson } from '../redis-json.ts'

export interface StoredResponse {
  /** The response object, exactly as the API answered it. */
  response: Record<string, unknown>
  /** The conversation before the answer, as Responses input items (each with an `id`). */
  input: Array<Record<string, unknown>>
}

/** The commands the store needs; @upstash/redis satisfies it. */
export interface ResponsesRedis {
  eval(script: string, keys: string[], args: unknown[]): Promise<unknown>
  get(key: string): Promise<unknown>
}

export interface ResponsesStoreLimits {
  ttlMs: number
  maxBytesPerTenant: number
}

/** OpenAI keeps a stored response 30 days. */
export const DEFAULT_RESPONSES_TTL_MS = 30 * 24 * 3600 * 1000
export const DEFAULT_RESPONSES_MAX_BYTES_PER_TENANT = 64 * 1024 * 1024

const tenantPart = (tenant: string) => encodeURIComponent(tenant)
const recordKey = (tenant: string, id: string) => `zl:resp:${tenantPart(tenant)}:${id}`
const tenantKeys = (tenant: string, id: string) => [recordKey(tenant, id), `zl:resp-idx:${tenantPart(tenant)}`, `zl:resp-size:${tenantPart(tenant)}`]

const SAVE = `
local id, value, ttl, max, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - #id)
local old = redis.call('HGET', KEYS[3], id)
if old then redis.call('HINCRBY', KEYS[3], '#total', -tonumber(old)) end
redis.call('SET', KEYS[1], value, 'PX', ttl)
redis.call('ZADD', KEYS[2], now, id)
redis.call('HSET', KEYS[3], id, #value)
local total = redis.call('HINCRBY', KEYS[3], '#total', #value)
while total > max do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest or oldest == id then break end
  redis.call('ZREM', KEYS[2], oldest)
  redis.call('DEL', prefix .. oldest)
  total = redis.call('HINCRBY', KEYS[3], '#total', -tonumber(redis.call('HGET', KEYS[3], oldest) or '0'))
  redis.call('HDEL', KEYS[3], oldest)
end
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return total`

const DELETE = `
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local size = redis.call('HGET', KEYS[3], ARGV[1])
if size then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HINCRBY', KEYS[3], '#total', -tonumber(size))
end
return n`

/** The stored value (redis-json.ts: parsed by @upstash/redis, or a raw client's string). */
const Stored = redisJson(z.object({ response: z.record(z.string(), z.unknown()), input: z.array(z.record(z.string(), z.unknown())) }))

/** Ids are `resp_` + an x-request-id (a plain string, CLIENT_REQUEST_ID at the edge): anything else is no stored id. */
const STORED_ID = /^resp_[A-Za-z0-9._:-]{1,128}$/

export function isStoredResponseId(id: string): boolean {
  return STORED_ID.test(id)
}

export class ResponsesStore {
  constructor(
    private readonly redis: ResponsesRedis,
    private readonly limits: ResponsesStoreLimits = { ttlMs: DEFAULT_RESPONSES_TTL_MS, maxBytesPerTenant: DEFAULT_RESPONSES_MAX_BYTES_PER_TENANT },
  ) {}

  /** Keeps (or replaces) a response; resolves once Redis has it. */
  async save(tenant: string, id: string, record: StoredResponse, nowMs = Date.now()): Promise<void> {
    await this.redis.eval(SAVE, tenantKeys(tenant, id), [id, JSON.stringify(record), this.limits.ttlMs, this.limits.maxBytesPerTenant, nowMs])
  }

  /** The tenant's response, or undefined (never stored, expired, deleted, another tenant's, or unreadable). */
  async load(tenant: string, id: string): Promise<StoredResponse | undefined> {
    if (!isStoredResponseId(id)) return undefined
    const raw = await this.redis.get(recordKey(tenant, id))
    if (raw === null || raw === undefined) return undefined
    const parsed = Stored.safeParse(raw)
    return parsed.success ? (parsed.data as StoredResponse) : undefined
  }

  /** True when the tenant had it. */
  async delete(tenant: string, id: string): Promise<boolean> {
    if (!isStoredResponseId(id)) return false
    return Number(await this.redis.eval(DELETE, tenantKeys(tenant, id), [id])) > 0
  }
}
