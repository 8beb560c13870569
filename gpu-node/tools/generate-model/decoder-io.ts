/**
 * The Optimum "decoder with past" interface, the contract every runner relies on:
 *   inputs  input_ids [B,S] i64, attention_mask [B,P+S] i64, position_ids [B,S] i64,
 *           past_key_values.{i}.key|value [B,H_kv,P,D] f32
 *   outputs logits [B,S,V] f32, present.{i}.key|value [B,H_kv,P+S,D] f32
 * The first step passes past tensors with P = 0.
 * With `derivedPositions` there is no position_ids input: positions are arange(P, P+S) for every
 * row, computed from the past length (older Optimum GPT-2 exports).
 * With `optionalInputs` the graph also declares, after the past tensors,
 *   use_cache_branch [1] bool (merged "--legacy" exports; ours computes the same either way)
 *   num_logits_to_keep [] i64 (logits only for the last N positions: [B,N,V]; 0 keeps all)
 * and with `logitsToKeep` only num_logits_to_keep.
 */

import type { GraphBuilder } from './graph-builder.ts'
import { declaresLogitsToKeep, headDim, kvHeadCount, usesSlotCache, type ModelPreset } from './presets.ts'

const BATCH = 'batch_size'
const SEQ = 'sequence_length'
const PAST = 'past_sequence_length'
const TOTAL = 'total_sequence_length'
const CAPACITY = 'past_capacity'

export interface DecoderInputs {
  inputIds: string
  attentionMask: string
  positionIds: string
  pastKeys: string[]
  pastValues: string[]
  /** Declared only with optionalInputs. */
  useCacheBranch?: string
  numLogitsToKeep?: string
}

export const pastKeyName = (layer: number): string => `past_key_values.${layer}.key`
export const pastValueName = (layer: number): string => `past_key_values.${layer}.value`
export const presentKeyName = (layer: number): string => `present.${layer}.key`
export const presentValueName = (layer: number): string => `present.${layer}.value`
/** The slot-cache variant's outputs: only this step's K/V, [B,H_kv,S,D]. */
export const newKeyName = (layer: number): string => `new_key_values.${layer}.key`
export const newValueName = (layer: number): string => `new_key_values.${layer}.value`
export const LOGITS = 'logits'
export const USE_CACHE_BRANCH = 'use_cache_branch'
export const NUM_LOGITS_TO_KEEP = 'num_logits_to_keep'
const KEPT = 'num_logits_to_keep_length'

/** Input names in declaration order. */
export function decoderInputNames(layers: number, optionalInputs = false, logitsToKeep = optionalInputs, derivedPositions = false): string[] {
  const names = derivedPositions ? ['input_ids', 'attention_mask'] : ['input_ids', 'attention_mask', 'position_ids']
  for (let i = 0; i < layers; i++) names.push(pastKeyName(i), pastValueName(i))
  if (optionalInputs) names.push(USE_CACHE_BRANCH)
  if (optionalInputs || logitsToKeep) names.push(NUM_LOGITS_TO_KEEP)
  return names
}

/** Output names in declaration order. */
export function decoderOutputNames(layers: number): string[] {
  const names = [LOGITS]
  for (let i = 0; i < layers; i++) names.push(presentKeyName(i), presentValueName(i))
  return names
}

export function declareDecoderInputs(g: GraphBuilder, p: ModelPreset): DecoderInputs {
  if (p.derivedPositions && usesSlotCache(p)) throw new Error('derivedPositions needs the concat KV interface')
  const kvShape = [BATCH, kvHeadCount(p), usesSlotCache(p) ? CAPACITY : PAST, headDim(p)]
  const inputIds = g.input('input_ids', 'int64', [BATCH, SEQ])
  const attentionMask = g.input('attention_mask', 'int64', [BATCH, TOTAL])
  const positionIds = p.derivedPositions ? '' : g.input('position_ids', 'int64', [BATCH, SEQ])
  const inputs: DecoderInputs = { inputIds, attentionMask, positionIds, pastKeys: [], pastValues: [] }
  for (let i = 0; i < p.layers; i++) {
    inputs.pastKeys.push(g.input(pastKeyName(i), 'float32', kvShape))
    inputs.pastValues.push(g.input(pastValueName(i), 'float32', kvShape))
  }
  if (p.derivedPositions) inputs.positionIds = positionsFromPastLength(g, inputIds, inputs.pastKeys[0]!)
  if (p.optionalInputs) inputs.useCacheBranch = g.input(USE_CACHE_BRANCH, 'bool', [1])
  if (declaresLogitsToKeep(p)) inputs.numLogitsToKeep = g.input(NUM_LOGITS_TO_KEEP, 'int64', [])
  return inputs
}

/**
 * [1,S] positions arange(P, P+S), P = the past's length (dim 2 of a past key), broadcast over the
 * batch: what transformers' GPT-2 computes when no position_ids are given. Every row of a
 * left-padded batch gets the same positions, so a padded row's are shifted by its padding.
 */
function positionsFromPastLength(g: GraphBuilder, inputIds: string, pastKey: string): string {
  const dim = (value: string, axis: number) => g.op('Squeeze', [g.op('Shape', [value], { start: { int: axis }, end: { int: axis + 1 } }), g.ints([0])])
  const past = dim(pastKey, 2)
  const range = g.op('Range', [past, g.op('Add', [past, dim(inputIds, 1)]), g.intScalar(1)])
  return g.op('Unsqueeze', [range, g.ints([0])])
}

/**
 * The final hidden states [B,S,d] the LM head reads. Without optional inputs, `h` itself. With
 * num_logits_to_keep: h[:, -N:, :] (N = 0 or N >= S keeps every position, as in transformers).
 * With use_cache_branch: then Where(use_cache_branch, x, x), which keeps the input connected
 * without changing a value (real merged exports pick a subgraph with it; ours has one path).
 */
export function logitPositions(g: GraphBuilder, io: DecoderInputs, h: string): string {
  if (io.numLogitsToKeep === undefined) return h
  const start = g.op('Unsqueeze', [g.op('Neg', [io.numLogitsToKeep]), g.ints([0])])
  const kept = g.op('Slice', [h, start, g.ints([Number.MAX_SAFE_INTEGER]), g.ints([1])])
  return io.useCacheBranch === undefined ? kept : g.op('Where', [io.useCacheBranch, kept, kept])
}

/** Declares the outputs; the graph must already have produced values of these names. */
export function declareDecoderOutputs(g: GraphBuilder, p: ModelPreset): void {
  const slots = usesSlotCache(p)
  const kvShape = [BATCH, kvHeadCount(p), slots ? SEQ : TOTAL, headDim(p)]
  g.output(LOGITS, 'float32', [BATCH, declaresLogitsToKeep(p) ? KEPT : SEQ, p.vocabSize])
  for (let i = 0; i < p.layers; i++) {
    g.output(slots ? newKeyName(i) : presentKeyName(i), 'float32', kvShape)
    g.output(slots ? newValueName(i) : presentValueName(i), 'float32', kvShape)
  }
}
