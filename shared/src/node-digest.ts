/**
 * `Digest` with node:crypto, synchronous: no thread-pool job, promise or buffer transfer per call
 * (what `crypto.subtle` costs in Node). For Node entries only — the edge's Node entry
 * (edge/src/entries/node-server.ts) and the GPU node; a Workers bundle must not import this file.
 */
// shared/tsconfig.json (no Node types, so shared code cannot touch Node globals) excludes this
// one Node-only file; the root and edge tsconfigs check it with Node's types.
import { createHmac, createSecretKey, hash, timingSafeEqual, type KeyObject } from 'node:crypto'
import type { Digest } from './digest.ts'

const MAC_BYTES = 32

/**
 * The secret as a KeyObject, made once: a process signs or verifies with one secret, and a string
 * key is encoded and imported again on every createHmac call.
 */
let keyFor: { secret: string; key: KeyObject } | undefined
function hmacKey(secret: string): KeyObject {
  if (keyFor?.secret !== secret) keyFor = { secret, key: createSecretKey(secret, 'utf8') }
  return keyFor.key
}

export const nodeDigest: Digest = {
  sha256Hex(data: Uint8Array | string): string {
    // One-shot (Node ≥ 20.12): no Hash object and its stream machinery per call. A string goes
    // in as is (hashed as UTF-8 natively), not through a TextEncoder first.
    return hash('sha256', data, 'hex')
  },
  hmacSha256Hex(secret: string, message: Uint8Array | string): string {
    return createHmac('sha256', hmacKey(secret)).update(message).digest('hex')
  },
  hmacVerify(secret: string, message: Uint8Array | string, mac: Uint8Array): boolean {
    // The length of a MAC is no secret; timingSafeEqual needs equal lengths.
    if (mac.length !== MAC_BYTES) return false
    const expected = createHmac('sha256', hmacKey(secret)).update(message).digest() as Uint8Array
    return timingSafeEqual(expected, mac) as boolean
  },
}
