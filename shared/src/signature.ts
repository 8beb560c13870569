/**
 * Edge → node request signing (DESIGN.md §4) with Web Crypto, so the same code runs in Workers
 * and Node. Header: `t=<epoch ms>,v1=<hex HMAC-SHA256(secret, t\nMETHOD\npath\nrequestId\nhex(sha256(body)))>`.
 * `path` is the URL pathname the edge forwards to (no query string); both sides must agree.
 */

export interface SignInput {
  secret: string
  method: string
  path: string
  requestId: string
  body: Uint8Array
  nowMs: number
}

export interface VerifyInput extends SignInput {
  /** The x-zl-signature value; null/undefined when absent. */
  header: string | null | undefined
  /** Allowed distance between `t` and `nowMs`, either way, in ms. */
  toleranceMs?: number
}

export type VerifyResult = { ok: true } | { ok: false; reason: 'missing' | 'malformed' | 'expired' | 'mismatch' }

export const DEFAULT_SIGNATURE_TOLERANCE_MS = 30_000

export async function signRequest(input: SignInput): Promise<string> {
  const t = Math.floor(input.nowMs)
  const key = await hmacKey(input.secret)
  const mac = await crypto.subtle.sign('HMAC', key, await signedBytes(t, input))
  return `t=${t},v1=${toHex(new Uint8Array(mac))}`
}

export async function verifySignature(input: VerifyInput): Promise<VerifyResult> {
  if (!input.header) return { ok: false, reason: 'missing' }
  const parsed = parseHeader(input.header)
  if (!parsed) return { ok: false, reason: 'malformed' }
  const toleranceMs = input.toleranceMs ?? DEFAULT_SIGNATURE_TOLERANCE_MS
  if (Math.abs(input.nowMs - parsed.t) > toleranceMs) return { ok: false, reason: 'expired' }
  const key = await hmacKey(input.secret)
  // subtle.verify compares the MACs in constant time; a hand-rolled string compare could leak.
  const ok = await crypto.subtle.verify('HMAC', key, parsed.mac, await signedBytes(parsed.t, input))
  return ok ? { ok: true } : { ok: false, reason: 'mismatch' }
}

function parseHeader(header: string): { t: number; mac: Uint8Array<ArrayBuffer> } | undefined {
  let t: number | undefined
  let v1: string | undefined
  for (const part of header.split(',')) {
    const eq = part.indexOf('=')
    if (eq < 0) return undefined
    const name = part.slice(0, eq).trim()
    const value = part.slice(eq + 1).trim()
    if (name === 't' && /^\d{1,16}$/.test(value)) t = Number(value)
    else if (name === 'v1' && /^[0-9a-f]{64}$/i.test(value)) v1 = value
    else return undefined
  }
  if (t === undefined || v1 === undefined) return undefined
  return { t, mac: fromHex(v1) }
}

async function signedBytes(t: number, input: Omit<SignInput, 'secret' | 'nowMs'>): Promise<Uint8Array<ArrayBuffer>> {
  const bodyHash = toHex(new Uint8Array(await crypto.subtle.digest('SHA-256', input.body as Uint8Array<ArrayBuffer>)))
  return encoder.encode(`${t}\n${input.method.toUpperCase()}\n${input.path}\n${input.requestId}\n${bodyHash}`)
}

const encoder = new TextEncoder()

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

function toHex(bytes: Uint8Array): string {
  let s = ''
  for (const b of bytes) s += b.toString(16).padStart(2, '0')
  return s
}

function fromHex(hex: string): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16)
  return out
}
