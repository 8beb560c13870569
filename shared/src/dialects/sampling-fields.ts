/**
 * Sampling fields accepted by every dialect, with their wire ranges, and their conversion to
 * SamplingParams. `top_k`, `min_p`, `repetition_penalty` and `ignore_eos` are vLLM extensions in
 * the OpenAI dialects (Anthropic has `top_k` natively). `null` means "default", as OpenAI allows.
 */

import { z } from 'zod'
import type { SamplingParams } from '../generation.ts'

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

export function toSamplingParams(f: SamplingFields): SamplingParams {
  const params: SamplingParams = {
    temperature: f.temperature ?? 1,
    topP: f.top_p ?? 1,
    topK: Math.max(0, f.top_k ?? 0),
    minP: f.min_p ?? 0,
    presencePenalty: f.presence_penalty ?? 0,
    frequencyPenalty: f.frequency_penalty ?? 0,
    repetitionPenalty: f.repetition_penalty ?? 1,
  }
  if (f.seed !== undefined && f.seed !== null) params.seed = f.seed
  return params
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
