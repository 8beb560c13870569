import type { ChatMessage, ToolSpec } from '../../../shared/src/generation.ts'
import type { ToolCallFormatName } from '../structured/tool-call-format.ts'
import type { GenerationDefaults } from './model-dir.ts'

/**
 * What the HTTP layer needs from the model side to turn a validated request into tokens:
 * the served model id, the context length, tokenization with the model's chat template, and the
 * model's defaults for what a request leaves unset.
 * Implemented by the loaded model directory (model-dir + tokenizer + chat-template).
 */
export interface PromptEncoder {
  /** The id clients send as `model` and /v1/models lists. */
  modelId: string
  /** Max prompt + generated tokens per sequence (the model's position limit). */
  contextLength: number
  /** Chat messages (and the tools the model may call) → template (with the generation prompt) → token ids. */
  encodeChat(messages: ChatMessage[], tools?: readonly ToolSpec[]): number[]
  /** How the model writes tool calls: what its template teaches, or the TOOL_CALL_FORMAT setting. */
  toolCallFormat: ToolCallFormatName
  /** Raw text → token ids (completions). */
  encodeText(prompt: string): number[]
  /**
   * Fill in the middle (completions `suffix`): the model's FIM prompt for the text between
   * `prefix` and `suffix`; a 400 naming `suffix` for a model without FIM tokens.
   */
  encodeInfill(prefix: string, suffix: string): number[]
  /** generation_config.json's sampling and max-token defaults. */
  defaults: GenerationDefaults
}
