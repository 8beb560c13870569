/**
 * Prompt length and max_tokens against the model's context, with the messages each API's users
 * know: vLLM's wording for the OpenAI dialects, Anthropic's for messages.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import type { Dialect } from '../../../shared/src/generation.ts'

/**
 * The number of tokens to generate: `requested` when it fits, the rest of the context when
 * absent (OpenAI chat without max_tokens). Throws context_length_exceeded otherwise.
 */
export function resolveMaxTokens(dialect: Dialect, promptTokens: number, requested: number | undefined, contextLength: number): number {
  const promptParam = dialect === 'openai-completions' ? 'prompt' : 'messages'
  const left = contextLength - promptTokens
  if (left <= 0) {
    const message =
      dialect === 'anthropic-messages'
        ? `prompt is too long: ${promptTokens} tokens > ${contextLength - 1} maximum`
        : `This model's maximum context length is ${contextLength} tokens. However, your ${promptParam} resulted in ${promptTokens} tokens, which leaves no room to generate. Please reduce the length of the ${promptParam}.`
    throw new ApiError('context_length_exceeded', message, { param: promptParam })
  }
  if (requested === undefined) return left
  if (requested <= left) return requested
  const message =
    dialect === 'anthropic-messages'
      ? `input length and \`max_tokens\` exceed context limit: ${promptTokens} + ${requested} > ${contextLength}, decrease input length or \`max_tokens\` and try again`
      : `This model's maximum context length is ${contextLength} tokens. However, you requested ${promptTokens + requested} tokens (${promptTokens} in the ${promptParam}, ${requested} in the completion). Please reduce the length of the ${promptParam} or completion.`
  throw new ApiError('context_length_exceeded', message, { param: 'max_tokens' })
}
