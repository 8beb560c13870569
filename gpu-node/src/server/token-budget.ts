/**
 * Prompt length and max_tokens against the model's context. The messages are the dialect's
 * (its codec's `contextLengthExceeded`): vLLM's wording for the OpenAI dialects, Anthropic's for
 * messages.
 */
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'

/**
 * The number of tokens to generate: `requested` when it fits; when absent (OpenAI chat without
 * max_tokens), the model's default (generation_config max_new_tokens) or the rest of the
 * context, whichever is smaller. Throws context_length_exceeded otherwise.
 */
export function resolveMaxTokens(codec: DialectCodec, promptTokens: number, requested: number | undefined, contextLength: number, modelDefault?: number): number {
  const left = contextLength - promptTokens
  if (left <= 0) throw codec.contextLengthExceeded.prompt(promptTokens, contextLength)
  if (requested === undefined) return Math.min(left, modelDefault ?? left)
  if (requested <= left) return requested
  throw codec.contextLengthExceeded.request(promptTokens, requested, contextLength)
}
