import { closeSync, fstatSync, openSync } from 'node:fs'
import { dirname } from 'node:path'
import * as ort from 'onnxruntime-node'
import { editedModelBytes, isEmptyEdit, joinEdits } from './graph-edit.ts'
import { chooseKvPath, type KvPath } from './kv-path.ts'
import { chooseLogitsPath, lastLogitsEdit, type LogitsPath } from './last-logits-edit.ts'
import { readGraphIndex } from './onnx-graph-index.ts'
import { FileReader } from './proto-file.ts'
import { slotKvEdit } from './slot-kv-edit.ts'

export interface OpenSessionOptions {
  /** config.json's numbers the choice looks at (model-dir.ts ModelConfig). */
  config: { slidingWindow?: number }
  /** Apply the slot KV edit where it is exact (config.ts SLOT_KV_EDIT; default on). */
  slotKvEdit?: boolean
  /** Apply the last-logits edit where it applies (last-logits-edit.ts; default on; off only to compare against it). */
  lastLogitsEdit?: boolean
}

export interface OpenedSession {
  session: ort.InferenceSession
  kvPath: KvPath
  logitsPath: LogitsPath
}

/**
 * The model's ONNX Runtime session, with the load-time edits that apply to its graph: the KV path
 * (kv-path.ts) and logits for the sampled positions only (last-logits-edit.ts). An edited graph
 * is created from the edited bytes, any other from its path, as before.
 *
 * External data: a session created from bytes has no model path, so ONNX Runtime would resolve a
 * tensor's `location` (model.onnx_data) against nothing and refuse it ("escapes working
 * directory"); the session config entry session.model_external_initializers_file_folder_path
 * names the folder instead (the model's own). onnxruntime-node's `externalData` option would take
 * the data file's bytes as a JS buffer, i.e. every weight in memory once more.
 *
 * If ONNX Runtime refuses the edited graph, the file is loaded unedited on the concat path, and
 * the reason says so.
 */
export async function openModelSession(onnxPath: string, options: ort.InferenceSession.SessionOptions, opts: OpenSessionOptions): Promise<OpenedSession> {
  let bytes: Buffer | undefined
  let kvPath: KvPath
  let logitsPath: LogitsPath
  const fd = openSync(onnxPath, 'r')
  try {
    const file = new FileReader(fd, fstatSync(fd).size)
    const index = readGraphIndex(file)
    const kv = chooseKvPath(index, opts.config, opts.slotKvEdit ?? true)
    const logits = chooseLogitsPath(index, opts.lastLogitsEdit ?? true)
    kvPath = kv.kvPath
    logitsPath = logits.logitsPath
    const edit = joinEdits([...(kv.edit ? [slotKvEdit(index, kv.edit)] : []), ...(logits.edit ? [lastLogitsEdit(file, index, logits.edit)] : [])])
    if (!isEmptyEdit(edit)) bytes = editedModelBytes(file, index, edit)
  } catch (e) {
    // Not an ONNX protobuf we can read: ONNX Runtime gives its own error for the file below.
    const why = `the graph could not be indexed (${(e as Error).message})`
    kvPath = { kvCache: 'concat', edited: false, why }
    logitsPath = { lastOnly: false, edited: false, why }
  } finally {
    closeSync(fd)
  }
  if (bytes) {
    const extra = { ...options.extra, session: { ...(options.extra?.session as object | undefined), model_external_initializers_file_folder_path: dirname(onnxPath) } }
    try {
      return { session: await ort.InferenceSession.create(bytes, { ...options, extra }), kvPath, logitsPath }
    } catch (e) {
      const why = `ONNX Runtime refused the edited graph (${(e as Error).message}); loaded unedited`
      kvPath = { kvCache: 'concat', edited: false, why }
      logitsPath = { lastOnly: false, edited: false, why }
    }
    bytes = undefined // the file's weights are not held twice past this point
  }
  return { session: await ort.InferenceSession.create(onnxPath, options), kvPath, logitsPath }
}
