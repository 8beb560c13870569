/**
 * Random bytes drawn from one pool refilled 4 KiB at a time (Web Crypto, so both runtimes): a
 * getRandomValues call per value is a synchronous job of its own in Node. Per request the edge
 * draws a request id, a trace and span id, and a stream's sampling seed; the seed alone, drawn
 * with its own getRandomValues, was 2.8 % of the edge's CPU profile at c64 on one core. Each byte
 * is handed out once.
 */
const POOL_BYTES = 4096
const pool = new Uint8Array(POOL_BYTES)
let poolOffset = POOL_BYTES
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'))

/** The offset of `bytes` fresh bytes in the pool (refilled when fewer are left). */
function take(bytes: number): number {
  if (poolOffset + bytes > POOL_BYTES) {
    crypto.getRandomValues(pool)
    poolOffset = 0
  }
  const at = poolOffset
  poolOffset += bytes
  return at
}

/** `bytes` random bytes as lowercase hex, never all zero (ids: trace, span, the edge's request id). */
export function randomHex(bytes: number): string {
  const at = take(bytes)
  let s = ''
  let zero = true
  for (let i = at; i < at + bytes; i++) {
    s += HEX[pool[i]!]
    if (pool[i] !== 0) zero = false
  }
  // All-zero ids are invalid; at 64+ random bits this is astronomically rare, but cheap to exclude.
  return zero ? '01' + s.slice(2) : s
}

/** A uniformly random unsigned 32-bit integer. */
export function randomUint32(): number {
  const at = take(4)
  return (pool[at]! | (pool[at + 1]! << 8) | (pool[at + 2]! << 16) | (pool[at + 3]! << 24)) >>> 0
}
