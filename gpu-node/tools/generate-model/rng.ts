/**
 * Seeded randomness for model weights. Every tensor draws from its own stream, derived from
 * (seed, tensor name), so a tensor's values do not depend on how many tensors came before it and
 * the same seed always yields byte-identical weights.
 */

/** splitmix32 finaliser: spreads a 32-bit input over all output bits (seed derivation). */
export function splitmix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  return (z ^ (z >>> 16)) >>> 0
}

/** A 32-bit stream seed for one named tensor: FNV-1a over the name, mixed with the model seed. */
export function streamSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ splitmix32(seed >>> 0)
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193)
  return splitmix32(h >>> 0)
}

/**
 * Fills `out` with N(mean, std²) samples: mulberry32 uniforms through Box–Muller. Uniforms are
 * offset by half a step so log() never sees 0. V8's Math.log/sin/cos are fdlibm ports, so the
 * result is the same on every machine.
 */
export function fillNormal(out: Float32Array, seed: number, std: number, mean = 0): void {
  let a = seed | 0
  const inv = 1 / 4294967296
  const twoPi = 2 * Math.PI
  for (let i = 0; i < out.length; i += 2) {
    a = (a + 0x6d2b79f5) | 0
    let t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    const u1 = (((t ^ (t >>> 14)) >>> 0) + 0.5) * inv
    a = (a + 0x6d2b79f5) | 0
    t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    const u2 = ((t ^ (t >>> 14)) >>> 0) * inv
    const r = Math.sqrt(-2 * Math.log(u1)) * std
    const theta = twoPi * u2
    out[i] = mean + r * Math.cos(theta)
    if (i + 1 < out.length) out[i + 1] = mean + r * Math.sin(theta)
  }
}

/** Uniforms in [0, 1) from `seed` (mulberry32, the generator fillNormal's samples come from). */
export function uniforms(seed: number): () => number {
  let a = seed | 0
  return () => {
    a = (a + 0x6d2b79f5) | 0
    let t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
