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
export type FinishReason = 'stop' | 'length' | 'stop_sequence' | 'tool_calls' | 'abort' | 'error'

/** A finish reason that ends a response normally. */
export type CompletedReason = Exclude<FinishReason, 'abort' | 'error'>

export function isCompletedReason(reason: FinishReason): reason is CompletedReason {
  return reason === 'stop' || reason === 'length' || reason === 'stop_sequence' || reason === 'tool_calls'
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


/** A tool call the assistant made earlier in the conversation, as chat templates receive it (transformers' shape). */
export interface ChatToolCall {
  id: string
  type: 'function'
  /** `arguments` parsed from the JSON the dialect carried: templates render it with `tojson`. */
  function: { name: string; arguments: unknown }
}

/**
 * One chat turn after dialect parsing, in the shape transformers' `apply_chat_template` passes to
 * templates: content is plain text (text parts joined); an assistant turn may carry the tool
 * calls it made, and a `tool` turn is one call's result.
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string
  tool_calls?: ChatToolCall[]
  /** On a `tool` turn: the call it answers. */
  tool_call_id?: string
}

/** A function the model may call: the name and description the template shows it, and its arguments' JSON Schema (serialized). */
export interface ToolSpec {
  name: string
  description?: string
  parameters: string
  /** Only what the schema names (OpenAI's `strict`); otherwise properties it does not mention are allowed. */
  strict: boolean
}

/** Whether and how the model must call tools: `required` is at least one call, a name is exactly that function. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string }

/** What a request lets the model call. */
export interface ToolUse {
  tools: ToolSpec[]
  choice: ToolChoice
  /** More than one call in one answer. */
  parallel: boolean
}

/**
 * What the generated text must match, enforced token by token on the node (structured output):
 * a JSON Schema (serialized), any JSON object, or tool calls in the model's own format (free
 * text allowed before a call in `auto` mode; each call's arguments match its tool's schema).
 */
export type OutputConstraint =
  | { kind: 'json_schema'; schema: string }
  | { kind: 'json_object' }
  | { kind: 'tool_calls'; format: string; tools: Array<{ name: string; schema: string; strict: boolean }>; mode: 'auto' | 'required'; parallel: boolean }

/** One call the model made: `arguments` is JSON text (as OpenAI sends it). */
export interface ToolCall {
  id: string
  name: string
  arguments: string
}

/** A piece of one tool call as it streams: `id` and `name` come in the call's first piece, then arguments in pieces. */
export interface ToolCallDelta {
  /** The call's position among this answer's calls. */
  index: number
  id?: string
  name?: string
  arguments: string
}

/** One generated token's log probability, and the most likely alternatives at its position. */
export interface TokenLogprob {
  token: string
  bytes: number[]
  logprob: number
  top: Array<{ token: string; bytes: number[]; logprob: number }>
}

/** A piece of an answer beside its text: tool-call pieces, the log probabilities of the tokens it completes, its choice (n > 1). */
export interface PieceExtra {
  toolCalls?: ToolCallDelta[]
  logprobs?: TokenLogprob[]
  choice?: number
}

/** One finished choice, as a JSON body reports it. */
export interface ChoiceOutput {
  /** The answer in order: text and calls as the model wrote them. */
  content: Array<{ type: 'text'; text: string } | { type: 'tool_call'; call: ToolCall }>
  reason: CompletedReason
  stopSequence?: string
  /** Present when the request asked for log probabilities. */
  logprobs?: TokenLogprob[]
}

/** A choice that is only text. */
export function textChoice(text: string, reason: CompletedReason, stopSequence?: string): ChoiceOutput {
  return stopSequence === undefined ? { content: [{ type: 'text', text }], reason } : { content: [{ type: 'text', text }], reason, stopSequence }
}

/** A choice's text, all of its text parts joined. */
export function choiceText(choice: ChoiceOutput): string {
  let text = ''
  for (const part of choice.content) if (part.type === 'text') text += part.text
  return text
}

/** A choice's tool calls, in order. */
export function choiceCalls(choice: ChoiceOutput): ToolCall[] {
  const calls: ToolCall[] = []
  for (const part of choice.content) if (part.type === 'tool_call') calls.push(part.call)
  return calls
}

/** A dialect body after validation: what the node turns into tokens and an EngineRequest. */

export interface GenerateRequest {
  /** The codec's name (a registered test dialect's too, so not only the served `Dialect`s of dialects/index.ts). */
  dialect: string
  model: string
  /** A text prompt's `suffix`: fill in the middle between the prompt and it (OpenAI completions `suffix`). */
  input: { kind: 'chat'; messages: ChatMessage[] } | { kind: 'text'; prompt: string; suffix?: string }
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
  /** vLLM's `priority` from the body (lower first); the edge applies it within the key's class. */
  priority?: number
  /** Structured output: what the generated text must match (OpenAI `response_format`). */
  constraint?: OutputConstraint
  /** The wire field that set `constraint`, named when its grammar cannot be compiled (default `response_format`). */
  constraintParam?: string
  /** Tools the model may call (the node renders them into the prompt and constrains the calls). */
  tools?: ToolUse
  /** Log probabilities of each generated token and this many alternatives (OpenAI `logprobs`/`top_logprobs`). */
  logprobs?: { top: number }
  /** Independent choices for the one prompt (OpenAI `n`); absent means 1. */
  n?: number
  /** The request's settings as its dialect's response repeats them (the Responses API echoes them). */
  responseEcho?: Record<string, unknown>
  /** A turn of a stored conversation (the Responses API's `store` and `previous_response_id`). */
  stored?: StoredTurn
}

/**
 * What a request asks of the response store (dialects/responses-store.ts): keep its answer, and
 * continue a kept one. The node reads the one it continues before tokenizing and writes the new
 * one before the terminal event; the edge routes a continuation to where its predecessor ran.
 */
export interface StoredTurn {
  /** Keep the answer (the node sets it false, and the echo with it, where there is no store). */
  store: boolean
  /** The kept answer this one continues. */
  previousId?: string
  /** This request's input items as the dialect stores them (ids added when kept). */
  items: Array<Record<string, unknown>>
}
