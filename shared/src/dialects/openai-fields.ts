/**
 * What the two OpenAI dialects (chat and completions) have in common: the harmless fields we
 * accept and ignore, `n`, streaming options, usage shape, and why known OpenAI features are refused.
 */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import type { CompletedReason, TokenLogprob, Usage } from '../generation.ts'
import type { UnsupportedFields } from './validate-body.ts'

/**
 * Accepted and ignored because they cannot change the generated text: `user` (abuse tracking),
 * `store` and `metadata` (OpenAI-side storage), `service_tier` (OpenAI billing tier).
 */
export const openAIHarmlessFields = {
  user: z.string().nullish(),
  store: z.boolean().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  service_tier: z.string().nullish(),
}

/**
 * OpenAI's `prompt_cache_key` (chat and completions): a name for requests that share a prefix,
 * e.g. one conversation. It only routes (the edge sends the requests it names to where their
 * prefix is cached); it never chooses cached tokens, which the node finds by token hash, so a
 * wrong or reused name can cost a cache miss but never another conversation's KV.
 */
export const promptCacheKeyField = {
  prompt_cache_key: z.string().nullish(),
}

/**
 * vLLM's `priority` (chat, completions, responses): lower runs first. A request may only lower its
 * own priority this way: the edge never runs it ahead of its key's class (shared/src/priority.ts).
 */
export const priorityField = {
  priority: z.int().min(-1_000_000).max(1_000_000).nullish(),
}

/** The priority the request asked for in its body (GenerateRequest.priority), when it did. */
export function toPriority(body: { priority?: number | null }): number | undefined {
  return body.priority ?? undefined
}

/** The request's context id (GenerateRequest.contextId), when it named one. */
export function toContextId(body: { prompt_cache_key?: string | null }): string | undefined {
  return body.prompt_cache_key ? body.prompt_cache_key : undefined
}

/** Choices per request: each is a sequence in the batch (the prompt prefilled once), so the bound is the batch's share one request may take. */
export const MAX_N = 8
export const nField = z.int().min(1).max(MAX_N).nullish()

/** OpenAI's bounds on alternatives per token: chat's `top_logprobs`, completions' `logprobs`. */
export const MAX_CHAT_TOP_LOGPROBS = 20
export const MAX_COMPLETION_LOGPROBS = 5

export const streamFields = {
  stream: z.boolean().nullish(),
  stream_options: z
    .strictObject({
      include_usage: z.boolean().nullish(),
      /** Random padding OpenAI adds against length side channels; we add none, which is harmless. */
      include_obfuscation: z.boolean().nullish(),
    })
    .nullish(),
}

type StreamFields = { stream?: boolean | null; stream_options?: { include_usage?: boolean | null } | null }

/** `stream_options` without `stream: true` is an error in OpenAI's API too. */
export function toStreamSettings(body: StreamFields): { stream: boolean; includeUsage: boolean } {
  const stream = body.stream ?? false
  if (!stream && body.stream_options != null) {
    throw new ApiError('invalid_request', "'stream_options' is only allowed when 'stream' is true.", { param: 'stream_options' })
  }
  return { stream, includeUsage: stream && (body.stream_options?.include_usage ?? false) }
}

export interface OpenAIUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  prompt_tokens_details: { cached_tokens: number }
}

/** OpenAI's arithmetic: prompt_tokens counts every prompt token; cached_tokens says how many of them came from the prefix cache. */
export function toOpenAIUsage(usage: Usage): OpenAIUsage {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedTokens ?? 0 },
  }
}

const FUNCTIONS = "the legacy function-calling fields are not supported: use 'tools' and 'tool_choice'"
const MEDIA = 'only text content is supported (no images, audio or files)'

/** Known OpenAI fields we refuse, with the reason the client sees. Anything else is "not a supported parameter". */
export const OPENAI_UNSUPPORTED: UnsupportedFields = {
  functions: FUNCTIONS,
  function_call: FUNCTIONS,
  logit_bias: 'logit bias is not available',
  audio: 'audio output is not available',
  modalities: 'only text output is available',
  prediction: 'predicted outputs are not available',
  reasoning_effort: 'reasoning controls are not available',
  web_search_options: 'web search is not available',
  name: 'participant names are not used by this server',
  image_url: MEDIA,
  input_audio: MEDIA,
  file: MEDIA,
}

export type OpenAIFinishReason = 'stop' | 'length' | 'tool_calls'

/** A completed sequence's finish_reason: OpenAI does not tell EOS from a stop string, both are `stop`. */
export function toOpenAIFinishReason(reason: CompletedReason): OpenAIFinishReason {
  return reason === 'length' || reason === 'tool_calls' ? reason : 'stop'
}

/** Chat's `logprobs` object for some tokens (OpenAI's shape). */
export function toChatLogprobs(logprobs: readonly TokenLogprob[] | undefined): { content: object[]; refusal: null } | null {
  if (!logprobs) return null
  return {
    content: logprobs.map((l) => ({ token: l.token, logprob: l.logprob, bytes: l.bytes, top_logprobs: l.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })) })),
    refusal: null,
  }
}

/**
 * Completions' legacy `logprobs` object for some tokens; `offset` is the text offset of the first
 * (the characters before it in this choice's text, the echoed prompt included).
 */
export function toCompletionLogprobs(logprobs: readonly TokenLogprob[] | undefined, offset: number): object | null {
  if (!logprobs) return null
  const textOffset: number[] = []
  let at = offset
  for (const l of logprobs) {
    textOffset.push(at)
    at += l.token.length
  }
  return {
    tokens: logprobs.map((l) => l.token),
    token_logprobs: logprobs.map((l) => l.logprob),
    top_logprobs: logprobs.map((l) => Object.fromEntries(l.top.map((t) => [t.token, t.logprob]))),
    text_offset: textOffset,
  }
}
