/**
 * What the two OpenAI dialects (chat and completions) have in common: the harmless fields we
 * accept and ignore, `n`, streaming options, usage shape, and why known OpenAI features are refused.
 */

import { z } from 'zod'
import { ApiError } from '../api-error.ts'
import type { CompletedReason, Usage } from '../generation.ts'
import type { UnsupportedFields } from './validate-body.ts'

/**
 * Accepted and ignored because they cannot change the generated text: `user` (abuse tracking),
 * `store` and `metadata` (OpenAI-side storage), `service_tier` (OpenAI billing tier),
 * `parallel_tool_calls` (meaningless without `tools`, which are rejected).
 */
export const openAIHarmlessFields = {
  user: z.string().nullish(),
  store: z.boolean().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  service_tier: z.string().nullish(),
  parallel_tool_calls: z.boolean().nullish(),
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

/** The request's context id (GenerateRequest.contextId), when it named one. */
export function toContextId(body: { prompt_cache_key?: string | null }): string | undefined {
  return body.prompt_cache_key ? body.prompt_cache_key : undefined
}

/** One choice per request: n > 1 would multiply work behind one rate-limit charge and one stream. */
export const nField = z.literal(1, { error: 'must be 1: n > 1 is not supported; send separate requests for more completions' }).nullish()

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

const TOOLS = 'tool and function calling are not available on this server'
const MEDIA = 'only text content is supported (no images, audio or files)'

/** Known OpenAI fields we refuse, with the reason the client sees. Anything else is "not a supported parameter". */
export const OPENAI_UNSUPPORTED: UnsupportedFields = {
  tools: TOOLS,
  tool_choice: TOOLS,
  functions: TOOLS,
  function_call: TOOLS,
  tool_calls: TOOLS,
  tool_call_id: TOOLS,
  response_format: 'structured output is not available; ask for the format in the prompt',
  logit_bias: 'logit bias is not available',
  top_logprobs: 'log probabilities are not available',
  audio: 'audio output is not available',
  modalities: 'only text output is available',
  prediction: 'predicted outputs are not available',
  reasoning_effort: 'reasoning controls are not available',
  web_search_options: 'web search is not available',
  suffix: 'insertion (suffix) is not available',
  name: 'participant names are not used by this server',
  image_url: MEDIA,
  input_audio: MEDIA,
  file: MEDIA,
}

export type OpenAIFinishReason = 'stop' | 'length'

/** A completed sequence's finish_reason: OpenAI does not tell EOS from a stop string, both are `stop`. */
export function toOpenAIFinishReason(reason: CompletedReason): OpenAIFinishReason {
  return reason === 'length' ? 'length' : 'stop'
}
