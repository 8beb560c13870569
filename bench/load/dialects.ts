/**
 * The two client dialects the load generator speaks (DESIGN.md §6), reduced to what a benchmark
 * needs: build a request body, and read one SSE frame as "text arrived", "usage says N tokens",
 * "stream done" or "stream error". Nothing here validates the full wire shape; the SDK tests do.
 */

export type BenchDialect = 'openai-chat' | 'anthropic-messages' | 'openai-completions' | 'openai-responses'

export const DIALECT_PATH: Record<BenchDialect, string> = {
  'openai-chat': '/v1/chat/completions',
  'anthropic-messages': '/v1/messages',
  'openai-completions': '/v1/completions',
  'openai-responses': '/v1/responses',
}

export interface BodyOptions {
  model: string
  /** Chat/messages: one user message; completions: the prompt text. */
  text: string
  maxTokens: number
  stream: boolean
  /** vLLM extension the node accepts: generate exactly maxTokens (benchmarks). */
  ignoreEos?: boolean
  /** OpenAI chat only: a whole conversation instead of one user message `text` (multi-turn scenarios). */
  messages?: Array<{ role: 'system' | 'user' | 'assistant'; content: string }>
  /** Responses only: the system turn, and the stored response this turn continues. */
  instructions?: string
  previousResponseId?: string
  /** Sampled instead of greedy: the temperature and the seed that makes it repeatable. */
  sampling?: { temperature: number; seed: number }
}

/** A request body as bytes (the edge forwards bytes; the node signs bytes). */
export function buildBody(dialect: BenchDialect, o: BodyOptions): Uint8Array {
  const common = { model: o.model, max_tokens: o.maxTokens, stream: o.stream, temperature: o.sampling?.temperature ?? 0, ...(o.sampling ? { seed: o.sampling.seed } : {}), ...(o.ignoreEos ? { ignore_eos: true } : {}) }
  let body: Record<string, unknown>
  if (dialect === 'openai-chat') body = { ...common, messages: o.messages ?? [{ role: 'user', content: o.text }], ...(o.stream ? { stream_options: { include_usage: true } } : {}) }
  else if (dialect === 'anthropic-messages') body = { ...common, messages: [{ role: 'user', content: o.text }] }
  else if (dialect === 'openai-responses') {
    const { max_tokens, ...rest } = common
    body = { ...rest, max_output_tokens: max_tokens, input: o.text, ...(o.instructions ? { instructions: o.instructions } : {}), ...(o.previousResponseId ? { previous_response_id: o.previousResponseId } : {}) }
  }
  else body = { ...common, prompt: o.text, ...(o.stream ? { stream_options: { include_usage: true } } : {}) }
  return new TextEncoder().encode(JSON.stringify(body))
}

export interface FrameMeaning {
  /** Generated text carried by this frame ('' or undefined: none). */
  text?: string
  /** Cumulative completion tokens reported by the server (usage chunk / message_delta). */
  usageTokens?: number
  /** Prompt tokens the server reused from its prefix cache (OpenAI cached_tokens, Anthropic cache_read_input_tokens). */
  cachedTokens?: number
  /** Every prompt token, as the server counted them (OpenAI usage.prompt_tokens). */
  promptTokens?: number
  /** The response's id (Responses: its terminal event). */
  responseId?: string
  done?: boolean
  error?: string
}

/** Interprets one SSE frame (`event:` name and joined `data:`) of the given dialect. */
export function readFrame(dialect: BenchDialect, event: string | undefined, data: string): FrameMeaning {
  if (data === '') return {}
  if (dialect !== 'anthropic-messages' && data === '[DONE]') return { done: true }
  let json: Record<string, any>
  try {
    json = JSON.parse(data) as Record<string, any>
  } catch {
    return { error: `non-JSON data: ${data.slice(0, 80)}` }
  }
  if (dialect === 'anthropic-messages') {
    switch (event ?? json.type) {
      case 'content_block_delta':
        return { text: json.delta?.text ?? '' }
      case 'message_delta':
        return { usageTokens: json.usage?.output_tokens, ...(typeof json.usage?.cache_read_input_tokens === 'number' ? { cachedTokens: json.usage.cache_read_input_tokens } : {}) }
      case 'message_stop':
        return { done: true }
      case 'error':
        return { error: json.error?.type ?? 'error' }
      default:
        return {}
    }
  }
  if (dialect === 'openai-responses') return readResponsesEvent(json)
  if (json.error) return { error: json.error?.code ?? json.error?.type ?? 'error' }
  const out: FrameMeaning = {}
  const choice = Array.isArray(json.choices) ? json.choices[0] : undefined
  const text = dialect === 'openai-chat' ? choice?.delta?.content : choice?.text
  if (typeof text === 'string' && text !== '') out.text = text
  if (json.usage && typeof json.usage.completion_tokens === 'number') out.usageTokens = json.usage.completion_tokens
  if (typeof json.usage?.prompt_tokens_details?.cached_tokens === 'number') out.cachedTokens = json.usage.prompt_tokens_details.cached_tokens
  if (typeof json.usage?.prompt_tokens === 'number') out.promptTokens = json.usage.prompt_tokens
  return out
}

function readResponsesEvent(json: Record<string, any>): FrameMeaning {
  switch (json.type) {
    case 'response.output_text.delta':
      return { text: json.delta ?? '' }
    case 'response.completed':
    case 'response.incomplete': {
      const usage = json.response?.usage
      return { done: true, responseId: json.response?.id, usageTokens: usage?.output_tokens, cachedTokens: usage?.input_tokens_details?.cached_tokens, promptTokens: usage?.input_tokens }
    }
    case 'error':
    case 'response.failed':
      return { error: json.code ?? 'error' }
    default:
      return {}
  }
}

/** Completion tokens of a non-streaming JSON answer. */
export function jsonCompletionTokens(dialect: BenchDialect, json: any): number | undefined {
  if (dialect === 'anthropic-messages' || dialect === 'openai-responses') return json?.usage?.output_tokens
  return json?.usage?.completion_tokens
}
