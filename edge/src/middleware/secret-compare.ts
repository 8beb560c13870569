/**
 * Constant-time secret comparison with Web Crypto only (Workers and Node): both sides are hashed
 * to 32 bytes first, so neither the length nor the position of the first difference leaks.
 */
const encoder = new TextEncoder()

export async function secretsEqual(given: string, expected: string): Promise<boolean> {
  const [a, b] = await Promise.all([digest(given), digest(expected)])
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!
  return diff === 0
}

async function digest(s: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(s)))
}
