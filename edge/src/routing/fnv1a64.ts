/**
 * FNV-1a, 64-bit, over the UTF-8 bytes of strings: the affinity key's hash (affinity-key.ts) and
 * the hash ring's points (hash-ring.ts).
 *
 * Why this one: it must give the same answer on Workers and Node, synchronously, on every request.
 * Web Crypto's digests are async (a promise and, on Node, a thread-pool job per call), and this is
 * not a security boundary: a collision only sends two conversations to the same place, which the
 * load bound (hash-ring.ts) and the node's own token-hash lookup make harmless. 64 bits keep such
 * collisions rare across millions of live conversations; 32 would not.
 *
 * The 64-bit multiply is done in two 32-bit halves (JS numbers are exact to 2^53), so no BigInt:
 * prime = 2^40 + 0x1b3, hence h·prime = h·0x1b3 + (h << 40).
 */

const OFFSET_HI = 0xcbf29ce4
const OFFSET_LO = 0x84222325
const PRIME_LO = 0x1b3
const TWO_32 = 0x1_0000_0000

export class Fnv1a64 {
  private hi = OFFSET_HI
  private lo = OFFSET_LO

  /** Feeds one byte (0..255). */
  byte(b: number): this {
    const lo = (this.lo ^ b) >>> 0
    const loProduct = lo * PRIME_LO // < 2^41: exact
    const carry = Math.floor(loProduct / TWO_32)
    this.hi = (Math.imul(this.hi, PRIME_LO) + (lo << 8) + carry) >>> 0
    this.lo = loProduct >>> 0
    return this
  }

  /**
   * Feeds the UTF-8 encoding of `text`, at most `maxBytes` of it (encoded inline: no TextEncoder
   * buffer per call). A lone surrogate is encoded as U+FFFD, as TextEncoder does.
   */
  text(text: string, maxBytes = Infinity): this {
    let fed = 0
    for (let i = 0; i < text.length && fed < maxBytes; i++) {
      let c = text.charCodeAt(i)
      if (c < 0x80) {
        this.byte(c)
        fed++
        continue
      }
      if (c >= 0xd800 && c <= 0xdfff) {
        const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0
        if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00)
          i++
        } else {
          c = 0xfffd
        }
      }
      const n = c < 0x800 ? 2 : c < 0x10000 ? 3 : 4
      const lead = n === 2 ? 0xc0 : n === 3 ? 0xe0 : 0xf0
      for (let k = n - 1; k >= 0 && fed < maxBytes; k--) {
        this.byte(k === n - 1 ? lead | (c >> (6 * k)) : 0x80 | ((c >> (6 * k)) & 63))
        fed++
      }
    }
    return this
  }

  /**
   * Feeds one field of a composite key: its length (4 bytes, of the UTF-16 length: cheap, and it
   * tells fields apart just as well), then its bytes, so ("ab", "c") and ("a", "bc") differ.
   */
  field(text: string): this {
    const n = text.length
    this.byte((n >>> 24) & 255).byte((n >>> 16) & 255).byte((n >>> 8) & 255).byte(n & 255)
    return this.text(text)
  }

  /** The 64-bit hash as 16 lowercase hex digits. */
  hex(): string {
    return this.hi.toString(16).padStart(8, '0') + this.lo.toString(16).padStart(8, '0')
  }

  /**
   * A 32-bit point on the hash ring: both halves folded through murmur3's finalizer, because
   * FNV's low bits alone are poorly mixed for inputs that differ only at the end (`node#1`, `node#2`).
   */
  point(): number {
    return fmix32(this.hi ^ Math.imul(this.lo, 0x9e3779b1))
  }
}

/** murmur3's 32-bit finalizer: every input bit affects every output bit. */
export function fmix32(h: number): number {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** FNV-1a 64 of one string's UTF-8 bytes, as hex. */
export function fnv1a64Hex(text: string): string {
  return new Fnv1a64().text(text).hex()
}
