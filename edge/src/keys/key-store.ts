/**
 * API key records by sha256 hash (DESIGN.md §3). The store only ever sees the hash: the key
 * itself never leaves the auth middleware.
 */
import { apiKeyRedisKey, parseApiKeyRecord, type ApiKeyRecord } from '../../../shared/src/api-key.ts'

export interface KeyStore {
  /** The record for a key hash, undefined when there is none; throws when the store is unreachable. */
  lookup(hashHex: string): Promise<ApiKeyRecord | undefined>
}

/** The one Redis command the key store needs; @upstash/redis satisfies it. */
export interface KeyRedis {
  hgetall(key: string): Promise<Record<string, unknown> | null>
}

export function createRedisKeyStore(redis: KeyRedis): KeyStore {
  return {
    async lookup(hashHex) {
      return parseApiKeyRecord(await redis.hgetall(apiKeyRedisKey(hashHex)))
    },
  }
}
