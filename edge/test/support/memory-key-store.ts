import type { ApiKeyRecord } from '../../../shared/src/api-key.ts'
import type { KeyStore } from '../../src/keys/key-store.ts'

/** A fixed table of key records by sha256 hex: the key store for tests without Redis. */
export function createMemoryKeyStore(records: ReadonlyMap<string, ApiKeyRecord>): KeyStore {
  return { lookup: async (hashHex) => records.get(hashHex) }
}
