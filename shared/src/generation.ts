/**
 * The dialect-neutral generation vocabulary shared by the edge, the node's HTTP layer and the
 * engine: sampling parameters, finish reasons, usage, and the validated request that every
 * dialect parser produces.
 */

/** Sampling parameters as the engine runs them: every field decided (resolveSampling). */
export interface SamplingParams {
  /** 0 means greedy. */
  temperature: number
  /** 1 means off. */
  topP: number
  /** 0 means off. */
  topK: number
  /** 0 means off. */
  minP: number
  /** OpenAI-style, applied to generated tokens only; 0 means off. */
  presencePenalty: number
  /** OpenAI-style, applied to generated tokens only; 0 means off. */
  frequencyPenalty: number
  /** HF/vLLM-style multiplicative penalty over prompt and generated tokens; 1 means off. */
  repetitionPenalty: number
  /** Seed for reproducible sampling; undefined means a random seed. */
  seed?: number
}

/**
 * What a request said about sampling: only the fields it set (absent and null are both unset),
 * so the node can fill the rest from the model's generation_config.json before the APIs' own
 * defaults, as vLLM does.
 */
export type SamplingRequest = Partial<SamplingParams>

/** The APIs' defaults for what neither the request nor the model sets: temperature 1 (OpenAI and Anthropic), every filter and penalty off. */
export const API_SAMPLING_DEFAULTS: SamplingParams = {
  temperature: 1,
  topP: 1,
  topK: 0,
  minP: 0,
  presencePenalty: 0,
  frequencyPenalty: 0,
  repetitionPenalty: 1,
}

/** Each field from the request if it set it, else from the model's defaults, else the API's. */
export function resolveSampling(requested: SamplingRequest, modelDefaults: SamplingRequest = {}): SamplingParams {
  return { ...API_SAMPLING_DEFAULTS, ...modelDefaults, ...requested }
}

export const GREEDY: SamplingParams = { ...API_SAMPLING_DEFAULTS, temperature: 0 }

/**
 * Why a sequence stopped, in the engine's words; each dialect words a completed one its own way
 * (its codec). `abort` and `error` end a stream with the dialect's error frame instead.
 */
export type FinishReason = 'stop' | 'length' | 'stop_sequence' | 'abort' | 'error'

/** A finish reason that ends a response normally. */
export type CompletedReason = Exclude<FinishReason, 'abort' | 'error'>

export function isCompletedReason(reason: FinishReason): reason is CompletedReason {
  return reason === 'stop' || reason === 'length' || reason === 'stop_sequence'
}

export interface Usage {
  /** Every prompt token, cached or not. */
  promptTokens: number
  completionTokens: number
  /** Of promptTokens, those whose KV came from the node's prefix cache (OpenAI cached_tokens, Anthropic cache_read_input_tokens). */
  cachedTokens?: number
  /** Of promptTokens, those this request wrote into the prefix cache (Anthropic cache_creation_input_tokens). */
  cacheCreationTokens?: number
}


/** One chat turn after dialect parsing: content is plain text (text parts joined). */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
}

/** A dialect body after validation: what the node turns into tokens and an EngineRequest. */
/**
 * What the generated text must match, enforced token by token on the node (structured output):
 * a JSON Schema (serialized), or any JSON object.
 */
export type OutputConstraint = { kind: 'json_schema'; schema: string } | { kind: 'json_object' }

export interface GenerateRequest {
  /** The codec's name (a registered test dialect's too, so not only the served `Dialect`s of dialects/index.ts). */
  dialect: string
  model: string
  input: { kind: 'chat'; messages: ChatMessage[] } | { kind: 'text'; prompt: string }
  /** undefined means "up to the context length" (OpenAI); Anthropic always sets it. */
  maxTokens?: number
  stop: string[]
  /** Only what the request set; the node resolves the rest (resolveSampling). */
  sampling: SamplingRequest
  stream: boolean
  /** OpenAI `stream_options.include_usage`. */
  includeUsage: boolean
  /** OpenAI completions `echo`. */
  echo?: boolean
  /** vLLM extension `ignore_eos`: generate up to maxTokens past EOS (benchmarks). */
  ignoreEos?: boolean
  /**
   * The name the client gave this request's conversation (OpenAI `prompt_cache_key`): it routes
   * the request to where that conversation's prefix is cached, and never selects cached tokens.
   */
  contextId?: string
  /** Structured output: what the generated text must match (OpenAI `response_format`). */
  constraint?: OutputConstraint
}
