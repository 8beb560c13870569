/**
 * The Optimum "decoder with past" interface, the contract every runner relies on:
 *   inputs  input_ids [B,S] i64, attention_mask [B,P+S] i64, position_ids [B,S] i64,
 *           past_key_values.{i}.key|value [B,H_kv,P,D] f32
 *   outputs logits [B,S,V] f32, present.{i}.key|value [B,H_kv,P+S,D] f32
 * The first step passes past tensors with P = 0.
 */

import type { GraphBuilder } from './graph-builder.ts'
import { headDim, kvHeadCount, type ModelPreset } from './presets.ts'

const BATCH = 'batch_size'
const SEQ = 'sequence_length'
const PAST = 'past_sequence_length'
const TOTAL = 'total_sequence_length'

export interface DecoderInputs {
  inputIds: string
  attentionMask: string
  positionIds: string
  pastKeys: string[]
  pastValues: string[]
}

export const pastKeyName = (layer: number): string => `past_key_values.${layer}.key`
export const pastValueName = (layer: number): string => `past_key_values.${layer}.value`
export const presentKeyName = (layer: number): string => `present.${layer}.key`
export const presentValueName = (layer: number): string => `present.${layer}.value`
export const LOGITS = 'logits'

/** Input names in declaration order. */
export function decoderInputNames(layers: number): string[] {
  const names = ['input_ids', 'attention_mask', 'position_ids']
  for (let i = 0; i < layers; i++) names.push(pastKeyName(i), pastValueName(i))
  return names
}

/** Output names in declaration order. */
export function decoderOutputNames(layers: number): string[] {
  const names = [LOGITS]
  for (let i = 0; i < layers; i++) names.push(presentKeyName(i), presentValueName(i))
  return names
}

export function declareDecoderInputs(g: GraphBuilder, p: ModelPreset): DecoderInputs {
  const kvShape = [BATCH, kvHeadCount(p), PAST, headDim(p)]
  const inputs: DecoderInputs = {
    inputIds: g.input('input_ids', 'int64', [BATCH, SEQ]),
    attentionMask: g.input('attention_mask', 'int64', [BATCH, TOTAL]),
    positionIds: g.input('position_ids', 'int64', [BATCH, SEQ]),
    pastKeys: [],
    pastValues: [],
  }
  for (let i = 0; i < p.layers; i++) {
    inputs.pastKeys.push(g.input(pastKeyName(i), 'float32', kvShape))
    inputs.pastValues.push(g.input(pastValueName(i), 'float32', kvShape))
  }
  return inputs
}

/** Declares the outputs; the graph must already have produced values of these names. */
export function declareDecoderOutputs(g: GraphBuilder, p: ModelPreset): void {
  const kvShape = [BATCH, kvHeadCount(p), TOTAL, headDim(p)]
  g.output(LOGITS, 'float32', [BATCH, SEQ, p.vocabSize])
  for (let i = 0; i < p.layers; i++) {
    g.output(presentKeyName(i), 'float32', kvShape)
    g.output(presentValueName(i), 'float32', kvShape)
  }
}
