/**
 * API key administration over Upstash Redis (DESIGN.md §3 step 2).
 *
 * Storage:
 * - `zl:key:<hex sha256(key)>`: Redis hash with the fields of `ApiKeyRecord` (shared/src/api-key.ts).
 *   The key itself is never stored; the edge finds the record by hashing what the client sent.
 * - `zl:key-ids`: Redis hash, field = key id, value = hex sha256 of that key. The index that lets
 *   `list` and `revoke` find records by id without knowing the key. Written together with the
 *   record in one MULTI/EXEC.
 *
 * Revoking sets `disabled` to 1; edges that cached the record positively notice within their
 * cache TTL (30 s).
 */
import type { Redis } from '@upstash/redis'
import {
  apiKeyRedisKey, generateApiKey, hashApiKey, isWellFormedApiKey, parseApiKeyRecord, toApiKeyFields,
  type ApiKeyRecord,
} from '../../shared/src/api-key.ts'
import type { PriorityClass } from '../../shared/src/priority.ts'

export const KEY_ID_INDEX = 'zl:key-ids'

/** The commands used here; any @upstash/redis client satisfies it. */
export type KeyAdminRedis = Pick<Redis, 'hget' | 'hgetall' | 'hset' | 'hdel' | 'multi' | 'pipeline'>

export interface NewKeyInput {
  tenant: string
  name?: string
  /** Requests per minute; 0 = deployment default. */
  rpm?: number
  /** Tokens per minute; 0 = deployment default. */
  tpm?: number
  /** Model ids, default ['*']. */
  models?: string[]
  /** Default interactive (shared/src/priority.ts). */
  priority?: PriorityClass
  /** Default: a new random id. */
  id?: string
  /** Epoch ms, default now. */
  created?: number
  disabled?: boolean
}

/** A record as `list` shows it: never the key, only a prefix of its hash. */
export interface KeyListing extends ApiKeyRecord {
  hashPrefix: string
}

const TENANT_PATTERN = /^[A-Za-z][A-Za-z0-9._-]{0,63}$/
const ID_PATTERN = /^key_[A-Za-z0-9]{1,64}$/

/** Creates a key; the returned `key` is the only copy there will ever be. */
export async function createKey(redis: KeyAdminRedis, input: NewKeyInput): Promise<{ key: string; record: ApiKeyRecord }> {
  const key = generateApiKey()
  const record = await seedKey(redis, key, input)
  return { key, record }
}

/**
 * Stores `key` with the given record (idempotent: the local stack seeds its dev key this way on
 * every start). An older index entry for the same key under another id is removed.
 */
export async function seedKey(redis: KeyAdminRedis, key: string, input: NewKeyInput): Promise<ApiKeyRecord> {
  if (!isWellFormedApiKey(key)) throw new Error('an API key is zl- followed by 32 base62 characters')
  const record = toRecord(input)
  const hash = await hashApiKey(key)
  const previous = parseApiKeyRecord(stringFields(await redis.hgetall(apiKeyRedisKey(hash))))
  const tx = redis.multi()
  if (previous && previous.id !== record.id) tx.hdel(KEY_ID_INDEX, previous.id)
  tx.hset(apiKeyRedisKey(hash), toApiKeyFields(record))
  tx.hset(KEY_ID_INDEX, { [record.id]: hash })
  await tx.exec()
  return record
}

/** Every indexed key, oldest first, optionally one tenant's. */
export async function listKeys(redis: KeyAdminRedis, filter: { tenant?: string } = {}): Promise<KeyListing[]> {
  const index = stringFields(await redis.hgetall(KEY_ID_INDEX))
  const hashes = Object.values(index ?? {})
  if (hashes.length === 0) return []
  const pipe = redis.pipeline()
  for (const hash of hashes) pipe.hgetall(apiKeyRedisKey(hash))
  const rows = await pipe.exec<unknown[]>()
  const listings: KeyListing[] = []
  rows.forEach((fields, i) => {
    const record = parseApiKeyRecord(stringFields(fields))
    if (record && (!filter.tenant || record.tenant === filter.tenant)) listings.push({ ...record, hashPrefix: hashes[i].slice(0, 8) })
  })
  return listings.sort((a, b) => a.created - b.created || a.id.localeCompare(b.id))
}

/** Disables the key with this id; undefined when there is none. */
export async function revokeKey(redis: KeyAdminRedis, id: string): Promise<ApiKeyRecord | undefined> {
  const hash = await redis.hget<string>(KEY_ID_INDEX, id)
  if (!hash) return undefined
  const redisKey = apiKeyRedisKey(String(hash))
  const record = parseApiKeyRecord(stringFields(await redis.hgetall(redisKey)))
  if (!record) return undefined
  await redis.hset(redisKey, { disabled: '1' })
  return { ...record, disabled: true }
}

export function newKeyId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(8))
  return `key_${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`
}

function toRecord(input: NewKeyInput): ApiKeyRecord {
  if (!TENANT_PATTERN.test(input.tenant)) {
    throw new Error('tenant must start with a letter and use only letters, digits, ".", "_" or "-" (at most 64)')
  }
  const id = input.id ?? newKeyId()
  if (!ID_PATTERN.test(id)) throw new Error('a key id is key_ followed by letters and digits')
  for (const [label, value] of [['rpm', input.rpm], ['tpm', input.tpm]] as const) {
    if (value !== undefined && !(Number.isSafeInteger(value) && value >= 0)) throw new Error(`${label} must be a whole number ≥ 0`)
  }
  const models = input.models?.map((m) => m.trim()).filter(Boolean) ?? []
  if (models.some((m) => m.includes(','))) throw new Error('model ids cannot contain commas')
  return {
    id,
    tenant: input.tenant,
    name: input.name ?? '',
    rpm: input.rpm ?? 0,
    tpm: input.tpm ?? 0,
    models: models.length > 0 ? models : ['*'],
    created: input.created ?? Date.now(),
    disabled: input.disabled ?? false,
    priority: input.priority ?? 'interactive',
  }
}

/**
 * @upstash/redis JSON-parses hash values by default ("60" → 60, "1" → 1); the record parser
 * expects strings. Turn them back: exact for ids, tenants (they start with a letter), numbers and
 * hashes; a free-text name that is itself JSON (e.g. "1.0") may come back normalized ("1"). Clients
 * made with `automaticDeserialization: false` (as the CLI's) return strings untouched, and HGETALL
 * as a flat field/value list.
 */
function stringFields(fields: unknown): Record<string, string> | null {
  if (!fields || typeof fields !== 'object') return null
  // Without automatic deserialization HGETALL comes back as the raw [field, value, …] list.
  const entries = Array.isArray(fields)
    ? Array.from({ length: fields.length >> 1 }, (_, i) => [fields[2 * i], fields[2 * i + 1]] as const)
    : Object.entries(fields)
  if (entries.length === 0) return null
  const out: Record<string, string> = {}
  for (const [k, v] of entries) out[String(k)] = typeof v === 'string' ? v : JSON.stringify(v)
  return out
}
