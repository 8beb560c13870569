/**
 * The engine's finish reasons in each dialect's words. Only a completed sequence has one:
 * `abort` and `error` end a stream with the dialect's error frame instead (error-body.ts).
 */

import type { FinishReason } from './generation.ts'

/** A finish reason that ends a response normally. */
export type CompletedReason = Exclude<FinishReason, 'abort' | 'error'>

export type OpenAIFinishReason = 'stop' | 'length'
export type AnthropicStopReason = 'end_turn' | 'stop_sequence' | 'max_tokens'

export function isCompletedReason(reason: FinishReason): reason is CompletedReason {
  return reason === 'stop' || reason === 'length' || reason === 'stop_sequence'
}

/** OpenAI does not distinguish EOS from a stop string: both are `stop`. */
export function toOpenAIFinishReason(reason: CompletedReason): OpenAIFinishReason {
  return reason === 'length' ? 'length' : 'stop'
}

export function toAnthropicStopReason(reason: CompletedReason): AnthropicStopReason {
  if (reason === 'length') return 'max_tokens'
  return reason === 'stop_sequence' ? 'stop_sequence' : 'end_turn'
}
