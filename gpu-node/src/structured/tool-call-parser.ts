/**
 * Reads tool calls out of a model's text as it streams, in its family's format
 * (tool-call-format.ts): content text passes through (holding back only what may be the start of
 * a call), a call's id and name go out as soon as its head is read, its arguments in pieces as
 * they come, whatever the split of the text into deltas (one delta may hold a whole call, or
 * several). The same parser reads a whole answer for a JSON body, so a streamed answer and a
 * collected one are the same calls, byte for byte.
 */
import type { ToolCallDelta } from '../../../shared/src/generation.ts'
import type { ToolCallFormat } from './tool-call-format.ts'

export type ParsedPiece = { type: 'text'; text: string } | { type: 'call'; delta: ToolCallDelta }

/** Text past a call's trigger within which its head must have been read: past it, the text was no call. */
const MAX_HEAD_CHARS = 256

export class ToolCallParser {
  private state: 'text' | 'head' | 'args' | 'tail' = 'text'
  /** Text held: a possible trigger's start, whitespace after a call, a head not yet complete, a call's tail. */
  private held = ''
  /** Calls begun so far; the current one is calls - 1. */
  calls = 0
  private afterCall = false
  /** The arguments' JSON scan: nesting depth, inside a string, after a backslash. */
  private depth = 0
  private started = false
  private inString = false
  private escaped = false
  private out: ParsedPiece[] = []

  constructor(
    private readonly format: ToolCallFormat,
    /** The id of call `index`: fixed by the request, so a continuation names its calls as the original did. */
    private readonly callId: (index: number) => string,
  ) {}

  /** The pieces `text` completes, in order. */
  push(text: string): ParsedPiece[] {
    let rest = text
    while (rest !== '') {
      if (this.state === 'text') rest = this.inText(rest)
      else if (this.state === 'head') rest = this.inHead(rest)
      else if (this.state === 'args') rest = this.inArgs(rest)
      else rest = this.inTail(rest)
    }
    return this.take()
  }

  /** The end of the answer: held text that turned out to be content. */
  flush(): ParsedPiece[] {
    if (this.state === 'text' && !(this.afterCall && this.format.between.test(this.held))) this.text(this.held)
    if (this.state === 'head') this.text(this.held)
    this.held = ''
    return this.take()
  }

  private inText(text: string): string {
    const buf = this.held + text
    const at = buf.indexOf(this.format.trigger)
    if (at >= 0) {
      this.content(buf.slice(0, at), true)
      this.state = 'head'
      this.held = ''
      return buf.slice(at)
    }
    const keep = partialSuffix(buf, this.format.trigger)
    this.content(buf.slice(0, buf.length - keep), false)
    this.held += buf.slice(buf.length - keep)
    return ''
  }

  /** Content before a trigger (`final`) or as far as it cannot be one; after a call, separators are held and dropped. */
  private content(text: string, final: boolean): void {
    if (this.afterCall) {
      if (this.format.between.test(text)) {
        this.held = final ? '' : text
        return
      }
      this.afterCall = false
    }
    this.held = ''
    this.text(text)
  }

  private inHead(text: string): string {
    this.held += text
    const m = this.format.head.exec(this.held)
    if (m) {
      const rest = this.held.slice(m[0].length)
      this.held = ''
      this.out.push({ type: 'call', delta: { index: this.calls, id: this.callId(this.calls), name: m[1]!, arguments: '' } })
      this.calls++
      this.state = 'args'
      this.depth = 0
      this.started = false
      this.inString = false
      this.escaped = false
      return rest
    }
    if (this.held.length > this.format.trigger.length + MAX_HEAD_CHARS) {
      // Not a call after all: what was held is content, and the scan goes on after it.
      const held = this.held
      this.held = ''
      this.state = 'text'
      this.text(held.slice(0, this.format.trigger.length))
      return held.slice(this.format.trigger.length)
    }
    return ''
  }

  /** Passes the arguments' JSON on as it comes, up to the end of its value. */
  private inArgs(text: string): string {
    let i = 0
    // Whitespace before the value is the head's (a model may put its space in the value's token).
    if (!this.started) {
      while (i < text.length && /\s/.test(text[i]!)) i++
      text = text.slice(i)
      i = 0
      if (text === '') return ''
      this.started = true
    }
    let done = false
    for (; i < text.length && !done; i++) {
      const c = text[i]!
      if (this.inString) {
        if (this.escaped) this.escaped = false
        else if (c === '\\') this.escaped = true
        else if (c === '"') this.inString = false
      } else if (c === '"') this.inString = true
      else if (c === '{' || c === '[') this.depth++
      else if (c === '}' || c === ']') done = --this.depth === 0
    }
    const piece = text.slice(0, i)
    if (piece !== '') this.args(piece)
    if (done) this.state = 'tail'
    return text.slice(i)
  }

  private inTail(text: string): string {
    this.held += text
    const close = this.format.end.slice(this.format.end.lastIndexOf('\n') + 1)
    const at = this.held.indexOf(close)
    if (at < 0) return ''
    const rest = this.held.slice(at + close.length)
    this.held = ''
    this.state = 'text'
    this.afterCall = true
    return rest
  }

  private text(text: string): void {
    if (text === '') return
    const last = this.out[this.out.length - 1]
    if (last?.type === 'text') last.text += text
    else this.out.push({ type: 'text', text })
  }

  private args(piece: string): void {
    const last = this.out[this.out.length - 1]
    if (last?.type === 'call' && last.delta.index === this.calls - 1) last.delta.arguments += piece
    else this.out.push({ type: 'call', delta: { index: this.calls - 1, arguments: piece } })
  }

  private take(): ParsedPiece[] {
    const out = this.out
    this.out = []
    return out
  }
}

/** The length of the longest end of `text` that begins `marker` (and is shorter than it). */
function partialSuffix(text: string, marker: string): number {
  for (let n = Math.min(text.length, marker.length - 1); n > 0; n--) if (marker.startsWith(text.slice(text.length - n))) return n
  return 0
}
