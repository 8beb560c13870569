/**
 * The hashing the edge and the node do per request (sha256 of an API key, sha256 of a body, the
 * HMAC of a signature), behind one small interface so each entry picks its implementation:
 * - `webDigest` (here): Web Crypto, the only choice in Workers, and the default everywhere;
 * - `nodeDigest` (node-digest.ts): node:crypto, synchronous. Node runs every `crypto.subtle`
 *   call as a thread-pool job (promise, transfer, callback) that costs far more CPU than the
 *   hash of a small body itself; only Node entries import it.
 * Results are identical (digest.test.ts); both compare MACs in constant time.
 */

export interface Digest {
  /** Lowercase hex sha256 of `data` (a string is hashed as its UTF-8 bytes). */
  sha256Hex(data: Uint8Array | string): string | Promise<string>
  /**
   * Lowercase hex HMAC-SHA256(secret as UTF-8, message; a string as UTF-8). Hex out and a string
   * in because the signature is built from text and sent as hex: node:crypto does both natively,
   * where encoding in and a JS hex loop out cost more than the HMAC's own JS (signature.ts).
   */
  hmacSha256Hex(secret: string, message: Uint8Array | string): string | Promise<string>
  /** Whether `mac` is HMAC-SHA256(secret, message), compared in constant time. */
  hmacVerify(secret: string, message: Uint8Array | string, mac: Uint8Array): boolean | Promise<boolean>
}

const encoder = new TextEncoder()

export const webDigest: Digest = {
  async sha256Hex(data) {
    return toHex(new Uint8Array(await crypto.subtle.digest('SHA-256', bytesOf(data))))
  },
  async hmacSha256Hex(secret, message) {
    return toHex(new Uint8Array(await crypto.subtle.sign('HMAC', await hmacKey(secret), bytesOf(message))))
  },
  async hmacVerify(secret, message, mac) {
    // subtle.verify compares the MACs in constant time; a hand-rolled string compare could leak.
    return crypto.subtle.verify('HMAC', await hmacKey(secret), mac as Uint8Array<ArrayBuffer>, bytesOf(message))
  },
}

function bytesOf(data: Uint8Array | string): Uint8Array<ArrayBuffer> {
  return (typeof data === 'string' ? encoder.encode(data) : data) as Uint8Array<ArrayBuffer>
}

/** Spelled without the DOM `CryptoKey` name so Node-typed projects that import this file compile too. */
type HmacKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>

/** Imported keys per secret: importKey costs more than the HMAC itself. Bounded for rotating secrets. */
const keyCache = new Map<string, Promise<HmacKey>>()
const KEY_CACHE_MAX = 8

function hmacKey(secret: string): Promise<HmacKey> {
  let key = keyCache.get(secret)
  if (!key) {
    if (keyCache.size >= KEY_CACHE_MAX) keyCache.clear()
    key = crypto.subtle.importKey('raw', encoder.encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify'])
    keyCache.set(secret, key)
    // A failed import must not poison the cache.
    key.catch(() => keyCache.delete(secret))
  }
  return key
}

export function toHex(bytes: Uint8Array): string {
  let s = ''
  for (const b of bytes) s += b.toString(16).padStart(2, '0')
  return s
}
