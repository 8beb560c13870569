/**
 * Prompt length and max_tokens against the model's context. The messages are the dialect's
 * (its codec's `contextLengthExceeded`): vLLM's wording for the OpenAI dialects, Anthropic's for
 * messages.
 */
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'

/**
 * The number of tokens to generate: `requested` when it fits, the rest of the context when
 * absent (OpenAI chat without max_tokens). Throws context_length_exceeded otherwise.
 */
export function resolveMaxTokens(codec: DialectCodec, promptTokens: number, requested: number | undefined, contextLength: number): number {
  const left = contextLength - promptTokens
  if (left <= 0) throw codec.contextLengthExceeded.prompt(promptTokens, contextLength)
  if (requested === undefined) return left
  if (requested <= left) return requested
  throw codec.contextLengthExceeded.request(promptTokens, requested, contextLength)
}
