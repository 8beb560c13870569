/**
 * Edge → node request signing (DESIGN.md §4). Header:
 * `t=<epoch ms>,v1=<hex HMAC-SHA256(secret, t\nMETHOD\npath\nrequestId\nhex(sha256(body)))>`.
 * `path` is the URL pathname the edge forwards to (no query string); both sides must agree.
 * The hashing is a `Digest`: Web Crypto by default (Workers and Node), node:crypto where a Node
 * entry passes `nodeDigest` (node-digest.ts) — the same bytes either way.
 */
import { webDigest, type Digest } from './digest.ts'
import { andThen } from './maybe-promise.ts'

export interface SignInput {
  secret: string
  method: string
  path: string
  requestId: string
  body: Uint8Array
  nowMs: number
  /** Further signed text (resume-wire.ts resumeSignedExtra); '' or absent: the plain §4 string. */
  extra?: string
}

export interface VerifyInput extends SignInput {
  /** The x-zl-signature value; null/undefined when absent. */
  header: string | null | undefined
  /** Allowed distance between `t` and `nowMs`, either way, in ms. */
  toleranceMs?: number
}

export type VerifyResult = { ok: true } | { ok: false; reason: 'missing' | 'malformed' | 'expired' | 'mismatch' }

export const DEFAULT_SIGNATURE_TOLERANCE_MS = 30_000

/**
 * The x-zl-signature value. With a synchronous Digest (nodeDigest) the answer is a string, not a
 * promise: the edge's Node entry signs every request, and each await of an already-known value
 * is a microtask turn of its own.
 */
export function signRequest(input: SignInput, digest: Digest = webDigest): string | Promise<string> {
  const t = Math.floor(input.nowMs)
  return andThen(digest.sha256Hex(input.body), (bodyHash) =>
    andThen(digest.hmacSha256Hex(input.secret, signedText(t, input, bodyHash)), (mac) => `t=${t},v1=${mac}`))
}

export async function verifySignature(input: VerifyInput, digest: Digest = webDigest): Promise<VerifyResult> {
  if (!input.header) return { ok: false, reason: 'missing' }
  const parsed = parseHeader(input.header)
  if (!parsed) return { ok: false, reason: 'malformed' }
  const toleranceMs = input.toleranceMs ?? DEFAULT_SIGNATURE_TOLERANCE_MS
  if (Math.abs(input.nowMs - parsed.t) > toleranceMs) return { ok: false, reason: 'expired' }
  // Constant-time MAC comparison (Digest.hmacVerify); a hand-rolled string compare could leak.
  const ok = await digest.hmacVerify(input.secret, signedText(parsed.t, input, await digest.sha256Hex(input.body)), parsed.mac)
  return ok ? { ok: true } : { ok: false, reason: 'mismatch' }
}

function parseHeader(header: string): { t: number; mac: Uint8Array } | undefined {
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

/** The signed text (DESIGN.md §4): HMAC'd as its UTF-8 bytes. */
function signedText(t: number, input: Omit<SignInput, 'secret' | 'nowMs'>, bodyHash: string): string {
  const extra = input.extra ? `\n${input.extra}` : ''
  return `${t}\n${input.method.toUpperCase()}\n${input.path}\n${input.requestId}\n${bodyHash}${extra}`
}

function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16)
  return out
}
