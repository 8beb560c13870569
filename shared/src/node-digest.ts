/**
 * `Digest` with node:crypto, synchronous: no thread-pool job, promise or buffer transfer per call
 * (what `crypto.subtle` costs in Node). For Node entries only — the edge's Node entry
 * (edge/src/entries/node-server.ts) and the GPU node; a Workers bundle must not import this file.
 */
// shared/tsconfig.json (no Node types, so shared code cannot touch Node globals) excludes this
// one Node-only file; the root and edge tsconfigs check it with Node's types.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import type { Digest } from './digest.ts'

const MAC_BYTES = 32

export const nodeDigest: Digest = {
  sha256Hex(data: Uint8Array): string {
    return createHash('sha256').update(data).digest('hex') as string
  },
  hmacSha256(secret: string, message: Uint8Array): Uint8Array {
    return createHmac('sha256', secret).update(message).digest() as Uint8Array
  },
  hmacVerify(secret: string, message: Uint8Array, mac: Uint8Array): boolean {
    // The length of a MAC is no secret; timingSafeEqual needs equal lengths.
    if (mac.length !== MAC_BYTES) return false
    const expected = createHmac('sha256', secret).update(message).digest() as Uint8Array
    return timingSafeEqual(expected, mac) as boolean
  },
}
