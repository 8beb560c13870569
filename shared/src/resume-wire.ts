/**
 * Resumable streams (DESIGN.md §4, "Resume"): what the edge and a node exchange so that a stream
 * whose node died can be continued on another node, token-exact.
 *
 * - The edge asks for `x-zl-resumable: 1`; the node then starts every content frame with an SSE
 *   `id:` line `<n>.<tokens>`: n = tokens generated so far, tokens = the ids (base64url varints)
 *   of the tokens generated since the previous id line: every token pushed through the node's
 *   text pipeline (detokenizer → stop checker) up to this frame. Text those tokens still hold back
 *   (a partial UTF-8 character, a tail that may become a stop string) is not in the frame; a
 *   continuation replays the same tokens through the same pipeline, holds the same text, and
 *   releases it with the tokens after. Both SDKs' SSE decoders
 *   ignore `id:` (openai: only event/data; @anthropic-ai/sdk: dispatch by `event:`).
 * - A continuation carries `x-zl-resume: <tokens>` (all delivered tokens, base64url varints) and
 *   the same body: the node prefills prompt + delivered tokens, replays its text pipeline over
 *   them without emitting, samples on from generated index n, and emits no preamble.
 * - `x-zl-seed: <uint32>` fixes the sampling seed of a request whose body has none, so an
 *   unseeded sampled stream can be continued exactly; the client's behaviour is unchanged
 *   (its answer was random anyway).
 * Both headers are signed (signature.ts `extra`), so a captured request cannot be replayed with
 * a different prefix.
 */

export const RESUME_HEADERS = {
  resumable: 'x-zl-resumable',
  resume: 'x-zl-resume',
  seed: 'x-zl-seed',
} as const

/** Token ids → base64url of unsigned LEB128 varints (about 2–3 chars per token for a 32k vocab). */
export function encodeTokens(ids: readonly number[]): string {
  const bytes: number[] = []
  for (const id of ids) {
    let v = id >>> 0
    while (v >= 0x80) {
      bytes.push((v & 0x7f) | 0x80)
      v >>>= 7
    }
    bytes.push(v)
  }
  let bin = ''
  for (const b of bytes) bin += String.fromCharCode(b)
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

/** The inverse of encodeTokens; undefined for anything that is not a well-formed encoding. */
export function decodeTokens(text: string): number[] | undefined {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return undefined
  let bin: string
  try {
    bin = atob(text.replace(/-/g, '+').replace(/_/g, '/'))
  } catch {
    return undefined
  }
  const ids: number[] = []
  let v = 0
  let shift = 0
  for (let i = 0; i < bin.length; i++) {
    const b = bin.charCodeAt(i)
    if (shift > 28) return undefined
    v += (b & 0x7f) * 2 ** shift
    shift += 7
    if (b < 0x80) {
      ids.push(v)
      v = 0
      shift = 0
    }
  }
  return shift === 0 ? ids : undefined
}

/**
 * `.f` after the tokens (of an id line, and of x-zl-resume) marks the finish flush: the frame that
 * released the text still held at the end. A continuation after it flushes its replayed pipeline
 * silently, or it would send that held text a second time when it finishes.
 */
const FLUSHED = '.f'

/** The id line a resumable content frame starts with. */
export function resumeIdLine(generated: number, tokens: readonly number[], flushed = false): string {
  return `id: ${generated}.${encodeTokens(tokens)}${flushed ? FLUSHED : ''}\n`
}

/** Parses an id value `<n>.<tokens>[.f]`; undefined when it is not one of ours. */
export function parseResumeId(value: string): { generated: number; tokens: number[]; flushed: boolean } | undefined {
  const dot = value.indexOf('.')
  if (dot <= 0 || !/^\d{1,9}$/.test(value.slice(0, dot))) return undefined
  const resume = parseResumeHeader(value.slice(dot + 1))
  return resume ? { generated: Number(value.slice(0, dot)), ...resume } : undefined
}

/** x-zl-resume's value: the delivered tokens, and whether the finish flush was delivered too. */
export function resumeHeader(tokens: readonly number[], flushed: boolean): string {
  return encodeTokens(tokens) + (flushed ? FLUSHED : '')
}

export function parseResumeHeader(value: string): { tokens: number[]; flushed: boolean } | undefined {
  const flushed = value.endsWith(FLUSHED)
  const tokens = decodeTokens(flushed ? value.slice(0, -FLUSHED.length) : value)
  return tokens ? { tokens, flushed } : undefined
}

/** The extra signed text of a request carrying resume headers ('' for an ordinary one). */
export function resumeSignedExtra(get: (name: string) => string | null | undefined): string {
  const resume = get(RESUME_HEADERS.resume) ?? ''
  const seed = get(RESUME_HEADERS.seed) ?? ''
  return resume === '' && seed === '' ? '' : `seed=${seed}\nresume=${resume}`
}
