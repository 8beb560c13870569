import type { GraphIndex } from './onnx-graph-index.ts'
import { matchSlotKv, type NewKvOutput } from './slot-kv-edit.ts'

/**
 * Which KV interface the node drives a graph through, and why, for the start-up log:
 * 'slots' (slot-kv-cache.ts: fixed buffers, only the step's new K/V leave the session) or
 * 'concat' (batch-kv-cache.ts: Optimum's present = past ⧺ new, copied out every step).
 */
export interface KvPath {
  kvCache: 'slots' | 'concat'
  /** The graph was edited at load to get there (slot-kv-edit.ts). */
  edited: boolean
  why: string
}

export interface KvPathChoice {
  kvPath: KvPath
  /** The outputs to add when the graph is to be edited. */
  edit?: NewKvOutput[]
}

export function chooseKvPath(index: GraphIndex, config: { slidingWindow?: number }, slotKvEdit: boolean): KvPathChoice {
  const m = matchSlotKv(index, config)
  if (m.kind === 'slots') return { kvPath: { kvCache: 'slots', edited: false, why: "the graph outputs new_key_values.* (zerolayer's slot KV interface)" } }
  if (m.kind === 'concat') return { kvPath: { kvCache: 'concat', edited: false, why: m.why } }
  if (!slotKvEdit) return { kvPath: { kvCache: 'concat', edited: false, why: 'the slot KV edit applies to this graph but is switched off (SLOT_KV_EDIT=0)' } }
  return {
    kvPath: {
      kvCache: 'slots',
      edited: true,
      why: `in all ${m.layers} layers present.* is Concat(past_key_values.*, new) on the sequence axis and the graph takes position_ids: edited at load to output only the new K/V (new_key_values.*) for the slot cache`,
    },
    edit: m.outputs,
  }
}
