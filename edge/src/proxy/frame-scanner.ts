/**
 * Watches the SSE bytes the edge forwards, without parsing them into objects: it passes on only
 * whole frames (a frame cut by a dying node must never reach the client, or a continuation's
 * frames would be glued onto half a frame), keeps the `id:` values of resumable streams
 * (shared/src/resume-wire.ts) as raw bytes, and notices a frame that ends the stream, by the
 * dialect's own prefixes (its codec's `streamEnds`).
 * Nodes write one frame per write, so the usual chunk is whole frames and passes through as is.
 *
 * Per frame it does native indexOf calls and a 4-byte compare, never a JS loop over the bytes; the
 * id values are decoded only when a continuation asks for them (`delivered`, `flushed`): most
 * streams never fail.
 */
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import { parseResumeId } from '../../../shared/src/resume-wire.ts'

const LF = 0x0a

/** A dialect's stream ends (its codec's `streamEnds`) as bytes, encoded once per codec. */
export interface StreamEnds {
  prefixes: readonly Uint8Array[]
  /** The shortest: a shorter frame is none of them. */
  minBytes: number
}

const encodedEnds = new WeakMap<DialectCodec, StreamEnds>()

export function streamEndsOf(codec: DialectCodec): StreamEnds {
  let ends = encodedEnds.get(codec)
  if (!ends) {
    const prefixes = codec.streamEnds.map((p) => new TextEncoder().encode(p))
    encodedEnds.set(codec, (ends = { prefixes, minBytes: Math.min(...prefixes.map((p) => p.byteLength)) }))
  }
  return ends
}
/** 'id: ' */
const I = 0x69
const D = 0x64
const COLON = 0x3a
const SPACE = 0x20
const ID_PREFIX_BYTES = 4
const EMPTY = new Uint8Array(0)
const decoder = new TextDecoder()

export class FrameScanner {
  /** The final frame went out: the stream is complete. */
  finalSeen = false

  constructor(private readonly ends: StreamEnds) {}

  /** A partial frame, held until its blank line arrives. */
  private tail: Uint8Array = EMPTY
  /** The id values of the frames forwarded so far, each followed by LF, undecoded. */
  private ids = new Uint8Array(256)
  private idsLength = 0
  /** What `ids[0..parsedTo)` decoded to. */
  private parsedTo = 0
  private readonly tokens: number[] = []
  private lastGenerated = 0
  private sawFlush = false

  /** Every token the client has been sent, in order. */
  get delivered(): readonly number[] {
    this.parse()
    return this.tokens
  }

  /** The generated count the last id line reported (a check on `delivered`). */
  get generated(): number {
    this.parse()
    return this.lastGenerated
  }

  /** The finish flush went out (its text must not be sent again by a continuation). */
  get flushed(): boolean {
    this.parse()
    return this.sawFlush
  }

  /** Takes a chunk; returns the whole frames ready to forward (possibly empty), holding any partial frame. */
  push(chunk: Uint8Array): Uint8Array {
    const held = this.tail.byteLength
    const bytes = held === 0 ? chunk : concat(this.tail, chunk)
    const n = bytes.byteLength
    let start = 0
    // A frame ends at a blank line ("\n\n"). The first candidate LF may be the held tail's last byte.
    let lf = bytes.indexOf(LF, held > 0 ? held - 1 : 0)
    while (lf >= 0 && lf + 1 < n) {
      if (bytes[lf + 1] !== LF) {
        lf = bytes.indexOf(LF, lf + 1)
        continue
      }
      this.frame(bytes, start, lf)
      start = lf + 2
      lf = bytes.indexOf(LF, start)
    }
    if (start === n) {
      this.tail = EMPTY
      return bytes
    }
    this.tail = bytes.slice(start)
    return bytes.subarray(0, start)
  }

  /** The upstream broke: a partial frame is dropped (the client never saw it). */
  dropPartial(): void {
    this.tail = EMPTY
  }

  /** One whole frame, bytes[from, lf] where lf is its first blank-line LF. */
  private frame(bytes: Uint8Array, from: number, lf: number): void {
    if (bytes[from] === I && bytes[from + 1] === D && bytes[from + 2] === COLON && bytes[from + 3] === SPACE) {
      const eol = bytes.indexOf(LF, from)
      this.keepId(bytes.subarray(from + ID_PREFIX_BYTES, eol))
      return
    }
    // Final frames carry no id line; the few other id-less frames (preamble, finish, usage) are compared.
    if (lf - from >= this.ends.minBytes && this.ends.prefixes.some((p) => startsWith(bytes, from, p))) this.finalSeen = true
  }

  private keepId(value: Uint8Array): void {
    const need = this.idsLength + value.byteLength + 1
    if (need > this.ids.byteLength) {
      const grown = new Uint8Array(Math.max(need, this.ids.byteLength * 2))
      grown.set(this.ids.subarray(0, this.idsLength))
      this.ids = grown
    }
    this.ids.set(value, this.idsLength)
    this.ids[need - 1] = LF
    this.idsLength = need
  }

  /** Decodes the id values kept since the last call. */
  private parse(): void {
    if (this.parsedTo === this.idsLength) return
    const text = decoder.decode(this.ids.subarray(this.parsedTo, this.idsLength - 1))
    this.parsedTo = this.idsLength
    for (const value of text.split('\n')) {
      const id = parseResumeId(value)
      if (!id) continue
      for (const t of id.tokens) this.tokens.push(t)
      this.lastGenerated = id.generated
      if (id.flushed) this.sawFlush = true
    }
  }
}

function startsWith(bytes: Uint8Array, at: number, prefix: Uint8Array): boolean {
  if (at + prefix.byteLength > bytes.byteLength) return false
  for (let i = 0; i < prefix.byteLength; i++) if (bytes[at + i] !== prefix[i]) return false
  return true
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength)
  out.set(a)
  out.set(b, a.byteLength)
  return out
}
