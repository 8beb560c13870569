/**
 * The shape every dialect module fills, and everything the rest of the code knows about a
 * dialect: its route, parsing a wire body into a GenerateRequest, encoding the engine's output as
 * its SSE frames or JSON body, and how it words errors and rate limits. Generic code (the edge's
 * middlewares, the node's routes, error-body.ts) asks the codec and never branches on a name.
 * Encoders are pure string builders; the caller owns the socket, keep-alives and ordering
 * (start → text* → finish | error).
 */

import type { ApiError } from '../api-error.ts'
import type { ErrorShape } from '../error-body.ts'
import type { ChoiceOutput, CompletedReason, GenerateRequest, PieceExtra, Usage } from '../generation.ts'
import type { StoredResponse } from './responses-store.ts'

export interface ResponseMeta {
  /** The request id (x-request-id); response ids are derived from it (`chatcmpl-…`, `cmpl-…`, `msg_…`). */
  requestId: string
  /** The model name as the client asked for it. */
  model: string
  /** Epoch seconds. */
  created: number
  /** The request's settings as the dialect's response repeats them (GenerateRequest.responseEcho). */
  echo?: Readonly<Record<string, unknown>>
}

export interface StreamMeta extends ResponseMeta {
  /** Prompt length in tokens: Anthropic's message_start reports it before any token. */
  promptTokens: number
  /** OpenAI `stream_options.include_usage`: every chunk carries `usage: null`, then a usage chunk. */
  includeUsage?: boolean
  /** Choices in the stream (OpenAI `n`; 1 when absent): the closing frames follow the last choice's finish. */
  choices?: number
  /** The model may call tools: the answer may hold call blocks, not only text (Anthropic opens its blocks as they come). */
  tools?: boolean
}

export interface StreamEncoder {
  /** Frames that precede any token: OpenAI chat's role chunk; Anthropic's message_start, content_block_start, ping. */
  start(): string
  /**
   * One piece of a choice's answer: its text delta, and beside it tool-call pieces and the log
   * probabilities of the tokens it completes; '' when there is nothing to send.
   */
  text(delta: string, extra?: PieceExtra): string
  /**
   * A choice's finish; after the last choice's, the closing frames. `usage` is the whole
   * response's, read at the last finish (`completionTokens` summed over choices; Anthropic's
   * output_tokens is cumulative).
   */
  finish(reason: CompletedReason, usage: Usage, stopSequence?: string, choice?: number): string
  /** The frame that ends a stream that failed after start(); the caller closes the stream after it. */
  error(err: unknown): string
}

/** The two per-key limits (DESIGN.md §3). */
export type LimitKind = 'requests' | 'tokens'

export interface LimitHeaderNames {
  limit: string
  remaining: string
  reset: string
}

/** A dialect's rate-limit headers: names spelled out once, not built per response. */
export interface LimitHeaderStyle {
  readonly names: Readonly<Record<LimitKind, LimitHeaderNames>>
  /** The reset header's value for a window that ends `resetMs` (>= 0) after `nowMs` (epoch ms). */
  reset(resetMs: number, nowMs: number): string
}

/** `context_length_exceeded` in the words the dialect's users know, naming the field at fault. */
export interface ContextLengthErrors {
  /** The prompt alone fills the context: nothing is left to generate. */
  prompt(promptTokens: number, contextLength: number): ApiError
  /** The prompt plus the requested max tokens exceed the context. */
  request(promptTokens: number, maxTokens: number, contextLength: number): ApiError
}

/** One dialect. Registered in the table (index.ts), it is served by the edge and the node alike. */
export interface DialectCodec<Name extends string = string> {
  /** Stable: a log field and metric label. */
  readonly name: Name
  /** The route this dialect is served on, e.g. `/v1/chat/completions`. */
  readonly path: string
  /** Validates a parsed JSON body; throws ApiError('invalid_request') naming the bad field. */
  parse(body: unknown): GenerateRequest
  streamEncoder(meta: StreamMeta): StreamEncoder
  /** The non-streaming response body: every choice (one unless the dialect has `n`), usage summed over them. */
  jsonBody(meta: ResponseMeta, choices: ChoiceOutput[], usage: Usage): object
  /** How its tool-call ids begin (`call_`, `toolu_`): the node derives the rest from the request. */
  readonly toolCallIdPrefix: string
  /** Status, body and stream frame of its errors (rendered by error-body.ts). */
  readonly errors: ErrorShape
  /** Its x-ratelimit-* style headers, sent on every response of a limited route. */
  readonly limitHeaders: LimitHeaderStyle
  /** What the node says when a prompt (plus max tokens) does not fit the model's context. */
  readonly contextLengthExceeded: ContextLengthErrors
  /**
   * How the frames that end this dialect's stream begin — its last frame, its error frame — byte
   * for byte as its encoders write them: the edge tells a finished stream from a broken one by
   * these prefixes alone, never parsing a frame (the edge's proxy/frame-scanner.ts).
   */
  readonly streamEnds: readonly string[]
  /** A dialect whose answers can be stored and continued (GenerateRequest.stored). */
  readonly stored?: StoredConversations
}

/** How a dialect's answers are kept (dialects/responses-store.ts) and continued. */
export interface StoredConversations {
  /** The stored id of the answer to a request (derived from the request id, like every response id). */
  id(requestId: string): string
  /** The body read as the next turn after `previous`: its kept conversation, then the new input. */
  parseContinuation(body: unknown, previous: StoredResponse): GenerateRequest
  /** The record of a finished answer: its JSON body, and the conversation it answered. */
  record(gen: GenerateRequest, meta: ResponseMeta, choices: ChoiceOutput[], usage: Usage, previous?: StoredResponse): StoredResponse
}
