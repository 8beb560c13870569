/**
 * One choice of an answer between the engine's text events and the dialect's encoder: tool calls
 * read out of its text (when the request offered tools), its log probabilities kept beside the
 * text they belong to, and what a resumable stream's id lines say. A piece the parser holds back
 * (the start of what may be a call) carries its tokens and log probabilities to the frame that
 * sends it, so the edge counts a token delivered only with its text.
 */
import { resumeIdLine } from '../../../shared/src/resume-wire.ts'
import type { StreamEncoder } from '../../../shared/src/dialects/index.ts'
import type { ChoiceOutput, CompletedReason, FinishReason, PieceExtra, TokenLogprob, ToolCall } from '../../../shared/src/generation.ts'
import type { EngineEvent } from '../engine/types.ts'
import type { ParsedPiece, ToolCallParser } from '../structured/tool-call-parser.ts'

type TextEvent = Extract<EngineEvent, { type: 'text' }>

export class AnswerChoice {
  /** The answer so far, for a JSON body. */
  private readonly content: ChoiceOutput['content'] = []
  private readonly calls = new Map<number, ToolCall>()
  private readonly logprobs: TokenLogprob[] = []
  /** What the frames held back so far did not send yet. */
  private held: { tokens: number[]; logprobs: TokenLogprob[]; flush: boolean } = { tokens: [], logprobs: [], flush: false }
  /** What the parser still held at the finish (taken once). */
  private rest: ParsedPiece[] | undefined

  /** `keepsText`: a stream's text is also kept, for result() (a JSON body's always is). */
  constructor(
    readonly index: number,
    private readonly parser: ToolCallParser | undefined,
    private readonly wantsLogprobs: boolean,
    private readonly keepsText = false,
  ) {}

  /** A stream's frames for one event ('' when all of it is held back); a continuation's replayed text only updates the state. */
  frames(event: TextEvent, encoder: StreamEncoder, resumable: boolean): string {
    const pieces = this.pieces(event.text)
    if (this.keepsText) for (const piece of pieces) this.add(piece)
    if (event.replayed) {
      this.encode(pieces, encoder, [])
      return ''
    }
    const held = this.held
    held.tokens.push(...event.tokens)
    if (event.logprobs) held.logprobs.push(...event.logprobs)
    if (event.flush) held.flush = true
    const frames = this.encode(pieces, encoder, held.logprobs)
    if (frames === '') return ''
    this.held = { tokens: [], logprobs: [], flush: false }
    // The id line rides at the head of the frame: the edge counts a frame delivered only whole.
    return resumable ? resumeIdLine(event.completionTokens, held.tokens, held.flush) + frames : frames
  }

  /** The closing frames of this choice: text the parser still held, then the dialect's finish. */
  finishFrames(encoder: StreamEncoder, reason: CompletedReason, usage: Parameters<StreamEncoder['finish']>[1], stopSequence?: string): string {
    return this.encode(this.settle(), encoder, this.held.logprobs) + encoder.finish(reason, usage, stopSequence, this.index)
  }

  /** Ends the text: what the parser still held, kept with the rest (before finishFrames sends it). */
  settle(): ParsedPiece[] {
    if (!this.rest) {
      this.rest = this.parser?.flush() ?? []
      for (const piece of this.rest) this.add(piece)
    }
    return this.rest
  }

  /** Collects an event for a JSON body. */
  collect(event: TextEvent): void {
    for (const piece of this.pieces(event.text)) this.add(piece)
    if (event.logprobs) this.logprobs.push(...event.logprobs)
  }

  /** The finished choice: a JSON body's, or a kept stream's (after settle). */
  result(reason: CompletedReason, stopSequence?: string): ChoiceOutput {
    this.settle()
    const out: ChoiceOutput = { content: this.content, reason }
    if (stopSequence !== undefined) out.stopSequence = stopSequence
    if (this.wantsLogprobs) out.logprobs = this.logprobs
    return out
  }

  /** The engine's reason in the dialects' words: an answer that ended after making calls ended for them. */
  reason(engine: Exclude<FinishReason, 'abort' | 'error'>): CompletedReason {
    return engine === 'stop' && (this.parser?.calls ?? 0) > 0 ? 'tool_calls' : engine
  }

  private pieces(text: string): ParsedPiece[] {
    return this.parser ? this.parser.push(text) : text === '' ? [] : [{ type: 'text', text }]
  }

  /** The pieces' frames; the log probabilities ride with the first frame sent (and are taken from `logprobs`). */
  private encode(pieces: ParsedPiece[], encoder: StreamEncoder, logprobs: TokenLogprob[]): string {
    let frames = ''
    for (const piece of pieces) {
      const extra: PieceExtra = { choice: this.index }
      if (frames === '' && logprobs.length > 0) extra.logprobs = logprobs.splice(0)
      frames += piece.type === 'text' ? encoder.text(piece.text, extra) : encoder.text('', { ...extra, toolCalls: [piece.delta] })
    }
    return frames
  }

  private add(piece: ParsedPiece): void {
    if (piece.type === 'call') {
      const known = this.calls.get(piece.delta.index)
      if (known) known.arguments += piece.delta.arguments
      else {
        const call = { id: piece.delta.id!, name: piece.delta.name!, arguments: piece.delta.arguments }
        this.calls.set(piece.delta.index, call)
        this.content.push({ type: 'tool_call', call })
      }
      return
    }
    const last = this.content[this.content.length - 1]
    if (last?.type === 'text') last.text += piece.text
    else this.content.push({ type: 'text', text: piece.text })
  }
}
