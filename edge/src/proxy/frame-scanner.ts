/**
 * Watches the SSE bytes the edge forwards, without parsing them into objects: it passes on only
 * whole frames (a frame cut by a dying node must never reach the client, or a continuation's
 * frames would be glued onto half a frame), collects the delivered tokens from the `id:` lines
 * of resumable streams (shared/src/resume-wire.ts), and notices the dialect's final frame.
 * Nodes write one frame per write, so the usual chunk is whole frames and passes through as is.
 */
import { parseResumeId } from '../../../shared/src/resume-wire.ts'

const LF = 0x0a
const ascii = (s: string) => new TextEncoder().encode(s)
/** Frames after which a node's stream is over: OpenAI's [DONE], Anthropic's message_stop, and either dialect's error event. */
const FINAL_PREFIXES = ['data: [DONE]', 'event: message_stop', 'event: error', 'data: {"error"'].map(ascii)
const ID_PREFIX = ascii('id: ')
const EMPTY = new Uint8Array(0)
const decoder = new TextDecoder()

export class FrameScanner {
  /** Every token the client has been sent, in order. */
  readonly delivered: number[] = []
  /** The generated count the last id line reported (a check on `delivered`). */
  generated = 0
  /** The finish flush went out (its text must not be sent again by a continuation). */
  flushed = false
  /** The final frame went out: the stream is complete. */
  finalSeen = false
  /** A partial frame, held until its blank line arrives. */
  private tail: Uint8Array = EMPTY

  /** Takes a chunk; returns the whole frames ready to forward (possibly empty), holding any partial frame. */
  push(chunk: Uint8Array): Uint8Array {
    const bytes = this.tail.byteLength === 0 ? chunk : concat(this.tail, chunk)
    let start = 0
    let cut = 0
    // A frame ends at a blank line ("\n\n"); scan from the first byte that can complete one.
    for (let i = Math.max(1, this.tail.byteLength); i < bytes.byteLength; i++) {
      if (bytes[i] !== LF || bytes[i - 1] !== LF) continue
      this.frame(bytes, start, i + 1)
      start = cut = i + 1
    }
    this.tail = cut === bytes.byteLength ? EMPTY : bytes.slice(cut)
    return cut === bytes.byteLength ? bytes : bytes.subarray(0, cut)
  }

  /** The upstream broke: a partial frame is dropped (the client never saw it). */
  dropPartial(): void {
    this.tail = EMPTY
  }

  private frame(bytes: Uint8Array, from: number, to: number): void {
    if (startsWith(bytes, from, ID_PREFIX)) {
      const eol = bytes.indexOf(LF, from)
      const id = parseResumeId(decoder.decode(bytes.subarray(from + ID_PREFIX.byteLength, eol)))
      if (id) {
        for (const t of id.tokens) this.delivered.push(t)
        this.generated = id.generated
        if (id.flushed) this.flushed = true
      }
      return
    }
    if (FINAL_PREFIXES.some((p) => startsWith(bytes, from, p))) this.finalSeen = true
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
