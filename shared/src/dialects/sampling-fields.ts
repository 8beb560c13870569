/**
 * Sampling fields accepted by every dialect, with their wire ranges, and their conversion to
 * a SamplingRequest (only the fields set; the node fills the rest). `top_k`, `min_p`, `repetition_penalty` and `ignore_eos` are vLLM extensions in
 * the OpenAI dialects (Anthropic has `top_k` natively). `null` means "default", as OpenAI allows.
 */

import { z } from 'zod'
import type { SamplingRequest } from '../generation.ts'

const penalty = z.number().min(-2).max(2).nullish()

export const samplingFields = {
  /** 0 is greedy. Anthropic narrows this to 0..1. */
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  /** vLLM spells "off" as -1; we accept it as 0. */
  top_k: z.int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  presence_penalty: penalty,
  frequency_penalty: penalty,
  /** Multiplicative, HF/vLLM style: 1 is off, > 1 discourages repeats. */
  repetition_penalty: z.number().gt(0).nullish(),
  seed: z.int().nullish(),
  /** Keep generating past EOS up to max tokens (benchmarks need fixed-length outputs). */
  ignore_eos: z.boolean().nullish(),
}

export type SamplingFields = { [K in keyof typeof samplingFields]?: z.output<(typeof samplingFields)[K]> }

/** The fields the body set (null counts as unset, as OpenAI allows), in the engine's names. */
export function toSamplingRequest(f: SamplingFields): SamplingRequest {
  const s: SamplingRequest = {}
  if (f.temperature != null) s.temperature = f.temperature
  if (f.top_p != null) s.topP = f.top_p
  if (f.top_k != null) s.topK = Math.max(0, f.top_k)
  if (f.min_p != null) s.minP = f.min_p
  if (f.presence_penalty != null) s.presencePenalty = f.presence_penalty
  if (f.frequency_penalty != null) s.frequencyPenalty = f.frequency_penalty
  if (f.repetition_penalty != null) s.repetitionPenalty = f.repetition_penalty
  if (f.seed != null) s.seed = f.seed
  return s
}

const stopString = z.string().min(1)

/** `stop`: one string or up to `maxItems` strings, none empty (an empty stop would match at once). */
export function stopField(maxItems: number) {
  return z.union([stopString, z.array(stopString).max(maxItems)]).nullish()
}

export function toStopList(stop: string | string[] | null | undefined): string[] {
  if (stop === undefined || stop === null) return []
  return typeof stop === 'string' ? [stop] : [...stop]
}

/** Positive integer token budgets (`max_tokens`, `max_completion_tokens`). */
export const maxTokensField = z.int().min(1)
