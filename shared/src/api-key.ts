/**
 * API keys: `zl-` + 32 base62 characters. Only sha256(key) is ever stored, as the Redis hash
 * `zl:key:<hex sha256>` with the fields of `ApiKeyRecord` (DESIGN.md §3).
 */

import { webDigest, type Digest } from './digest.ts'
import { isPriorityClass, type PriorityClass } from './priority.ts'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
const KEY_PATTERN = /^zl-[0-9A-Za-z]{32}$/

export const API_KEY_PREFIX = 'zl-'

/** The Redis hash that holds one key's record. */
export function apiKeyRedisKey(hashHex: string): string {
  return `zl:key:${hashHex}`
}

/** What is stored per key (all strings in Redis; numbers parsed by the reader). */
export interface ApiKeyRecord {
  id: string
  tenant: string
  name: string
  /** Requests per minute; 0 or absent means the deployment default. */
  rpm: number
  /** Tokens per minute; 0 or absent means the deployment default. */
  tpm: number
  /** Allowed model ids, or ['*']. */
  models: string[]
  /** Epoch ms. */
  created: number
  disabled: boolean
  /** How its requests are scheduled against others (priority.ts); absent: interactive. */
  priority?: PriorityClass
}

export function isWellFormedApiKey(key: string): boolean {
  return KEY_PATTERN.test(key)
}

/** A new random key (rejection sampling keeps base62 unbiased). */
export function generateApiKey(): string {
  let out = API_KEY_PREFIX
  const buf = new Uint8Array(64)
  while (out.length < API_KEY_PREFIX.length + 32) {
    crypto.getRandomValues(buf)
    for (const b of buf) {
      if (b < 248 && out.length < API_KEY_PREFIX.length + 32) out += BASE62[b % 62]
    }
  }
  return out
}

/**
 * Hex sha256 of the key (its UTF-8 bytes): what the store is keyed by (Web Crypto unless a Node
 * entry passes nodeDigest, which answers synchronously: no promise per request then).
 */
export function hashApiKey(key: string, digest: Digest = webDigest): string | Promise<string> {
  return digest.sha256Hex(key)
}

/** Redis hash fields → record; undefined when the hash is empty or unreadable. */
export function parseApiKeyRecord(fields: Record<string, unknown> | null | undefined): ApiKeyRecord | undefined {
  if (!fields || typeof fields.id !== 'string' || typeof fields.tenant !== 'string') return undefined
  const num = (v: unknown) => (v === undefined || v === null || v === '' ? 0 : Number(v))
  return {
    id: fields.id,
    tenant: fields.tenant,
    name: typeof fields.name === 'string' ? fields.name : '',
    rpm: num(fields.rpm),
    tpm: num(fields.tpm),
    models: String(fields.models ?? '*').split(',').map((m) => m.trim()).filter(Boolean),
    created: num(fields.created),
    disabled: fields.disabled === true || fields.disabled === 'true' || fields.disabled === '1' || fields.disabled === 1,
    priority: isPriorityClass(fields.priority) ? fields.priority : 'interactive',
  }
}

/** Record → Redis hash fields. */
export function toApiKeyFields(r: ApiKeyRecord): Record<string, string> {
  return {
    id: r.id,
    tenant: r.tenant,
    name: r.name,
    rpm: String(r.rpm),
    tpm: String(r.tpm),
    models: r.models.join(','),
    created: String(r.created),
    disabled: r.disabled ? '1' : '0',
    priority: r.priority ?? 'interactive',
  }
}
