/**
 * The shape every dialect module fills: parse a wire body into a GenerateRequest, and encode the
 * engine's output as that dialect's SSE frames or JSON body. Encoders are pure string builders;
 * the caller owns the socket, keep-alives and ordering (start → text* → finish | error).
 */

import type { RenderedError } from '../error-body.ts'
import type { CompletedReason } from '../finish-reason.ts'
import type { Dialect, GenerateRequest, Usage } from '../generation.ts'

export interface ResponseMeta {
  /** The request id (x-request-id); response ids are derived from it (`chatcmpl-…`, `cmpl-…`, `msg_…`). */
  requestId: string
  /** The model name as the client asked for it. */
  model: string
  /** Epoch seconds. */
  created: number
}

export interface StreamMeta extends ResponseMeta {
  /** Prompt length in tokens: Anthropic's message_start reports it before any token. */
  promptTokens: number
  /** OpenAI `stream_options.include_usage`: every chunk carries `usage: null`, then a usage chunk. */
  includeUsage?: boolean
}

export interface StreamEncoder {
  /** Frames that precede any token: OpenAI chat's role chunk; Anthropic's message_start, content_block_start, ping. */
  start(): string
  /** One text delta; '' for an empty delta (nothing to send). */
  text(delta: string): string
  /** The closing frames; `usage.completionTokens` is the total (Anthropic's output_tokens is cumulative). */
  finish(reason: CompletedReason, usage: Usage, stopSequence?: string): string
  /** The frame that ends a stream that failed after start(); the caller closes the stream after it. */
  error(err: unknown): string
}

export interface DialectCodec {
  readonly name: Dialect
  /** The route this dialect is served on, e.g. `/v1/chat/completions`. */
  readonly path: string
  /** Validates a parsed JSON body; throws ApiError('invalid_request') naming the bad field. */
  parse(body: unknown): GenerateRequest
  streamEncoder(meta: StreamMeta): StreamEncoder
  /** The non-streaming response body. */
  jsonBody(meta: ResponseMeta, text: string, reason: CompletedReason, usage: Usage, stopSequence?: string): object
  /** An error answered before any body byte, in this dialect. */
  renderError(err: unknown): RenderedError
}
