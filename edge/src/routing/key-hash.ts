/**
 * A small, fast, non-cryptographic 64-bit hash of strings: the affinity key (affinity-key.ts) and
 * the hash ring's points (hash-ring.ts). Two 32-bit multiply–xor lanes over the string's UTF-16
 * code units, finished with cyrb53's cross-mixing (public-domain construction, here keeping all
 * 64 bits).
 *
 * Why this one:
 * - it must give the same answer on Workers and Node, synchronously, on every request; Web
 *   Crypto's digests are async (a promise and, on Node, a thread-pool job per call);
 * - it is NOT a security boundary: a collision only sends two conversations to the same place,
 *   which the load bound (bounded-load.ts) and the node's own token-hash lookup make harmless;
 *   64 bits keep such collisions rare across millions of live conversations (32 would not);
 * - UTF-16 code units are what both runtimes hold, so the same text always gives the same units
 *   without encoding to UTF-8 first. Measured here: ~2.5 ns per character, the cost of reading
 *   the string (charCodeAt) itself; an exact FNV-1a 64 over UTF-8 (16-bit limbs) ran 6–12 ns per
 *   byte. A system prompt of many kB is hashed on every request.
 *
 * Changing any constant changes every key: bump affinity-key.ts's KEY_VERSION with it
 * (key-hash.test.ts pins known values).
 */

const SEED_1 = 0xdeadbeef
const SEED_2 = 0x41c6ce57
const MUL_1 = 2654435761
const MUL_2 = 1597334677

export class KeyHash {
  private h1 = SEED_1
  private h2 = SEED_2

  /** Feeds one 32-bit value (a length, a tag). */
  unit(u: number): this {
    this.h1 = Math.imul(this.h1 ^ u, MUL_1)
    this.h2 = Math.imul(this.h2 ^ u, MUL_2)
    return this
  }

  /** Feeds the code units of `text`, at most `maxUnits` of them. */
  text(text: string, maxUnits = Infinity): this {
    return this.range(text, 0, Math.min(text.length, maxUnits))
  }

  /** Feeds one field of a composite key: its length, then its text, so ("ab", "c") and ("a", "bc") differ. */
  field(text: string): this {
    return this.unit(text.length).text(text)
  }

  /**
   * Feeds a field that may be long, in bounded time: its length, its first `ends` code units and
   * its last `ends` (the whole text when it is at most 2 × `ends`). Two texts that differ only
   * in the middle hash the same; where that is harmless (affinity-key.ts), it keeps a 100 kB
   * message from costing ~100,000 multiply rounds on every request.
   */
  sampledField(text: string, ends: number): this {
    if (text.length <= 2 * ends) return this.field(text)
    return this.unit(text.length).range(text, 0, ends).range(text, text.length - ends, text.length)
  }

  /** Feeds code units [from, to) of `text`. */
  private range(text: string, from: number, to: number): this {
    let h1 = this.h1
    let h2 = this.h2
    // Copied into locals: read inside the loop, a module constant was a context load (and a
    // boxed number) per code unit; the affinity key over a 1 kB body took 51.3 k instructions,
    // now 33.0 k (bench/rig/validate-cost.ts, affinity mode).
    const m1 = MUL_1
    const m2 = MUL_2
    for (let i = from; i < to; i++) {
      const c = text.charCodeAt(i)
      h1 = Math.imul(h1 ^ c, m1)
      h2 = Math.imul(h2 ^ c, m2)
    }
    this.h1 = h1
    this.h2 = h2
    return this
  }

  /** The 64 finished bits as 16 lowercase hex digits. */
  hex(): string {
    const [a, b] = this.finish()
    return b.toString(16).padStart(8, '0') + a.toString(16).padStart(8, '0')
  }

  /** A 32-bit point on the hash ring. */
  point(): number {
    return this.finish()[0]
  }

  /** cyrb53's finalizer: each output half depends on every bit of both lanes. */
  private finish(): [number, number] {
    let h1 = this.h1
    let h2 = this.h2
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507)
    h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909)
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507)
    h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909)
    return [h1 >>> 0, h2 >>> 0]
  }
}
