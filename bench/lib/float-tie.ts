import * as ort from 'onnxruntime-node'
import { modelFeeds } from '../../gpu-node/src/model/batch-kv-cache.ts'
import type { ModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { readSessionIo } from '../../gpu-node/src/model/session-io.ts'
import { kvArray } from '../../gpu-node/src/model/tensor-dtype.ts'
import type { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'

/**
 * Two greedy decoders on one graph part only where two tokens' logits are equal within float
 * rounding (another kernel's summation order moves the last bits): such a split is a tie, not a
 * wrong token. TIE is the largest gap between the top logit and the other side's token counted
 * as one; a wrong position or mask moves logits by far more.
 */
export const TIE = 1e-3

export interface GreedySplit {
  /** The other side's token index where the texts part; undefined when they do not. */
  at?: number
  /** Top logit − the other side's token's logit there, from the unedited graph. */
  gap?: number
  tie: boolean
}

/**
 * Where our greedy text and another decoder's ids (`theirs`, after the same `prompt` ids) part,
 * and whether that is a tie: the graph's logits after the prompt and the tokens both produced
 * are read from a plain session of the file (past 0, every position's logits: no load-time
 * edit, the graph as exported).
 */
export async function greedySplit(dir: ModelDir, tok: ModelTokenizer, prompt: readonly number[], ours: string, theirs: readonly number[]): Promise<GreedySplit> {
  if (tok.decode([...theirs]) === ours) return { tie: false }
  // The longest run of their tokens our text begins with; a prefix that ends inside a character
  // (byte-level BPE decodes it as U+FFFD) is skipped, not taken as the split.
  let at = 0
  for (let i = 1; i <= theirs.length; i++) {
    const text = tok.decode(theirs.slice(0, i))
    if (text.endsWith('\uFFFD')) continue
    if (!ours.startsWith(text)) break
    at = i
  }
  const session = await ort.InferenceSession.create(dir.onnxPath, { intraOpNumThreads: 1 })
  try {
    const io = readSessionIo(session, dir.config)
    const ids = [...prompt, ...theirs.slice(0, at)]
    const n = ids.length
    const empty = () => new ort.Tensor(io.kvType, kvArray(io.kvType, 0), [1, io.numKvHeads, 0, io.headDim])
    const past = Array.from({ length: io.numLayers }, () => ({ key: empty(), value: empty() }))
    const feeds = modelFeeds(io, BigInt64Array.from(ids, BigInt), [1, n], new BigInt64Array(n).fill(1n), n, BigInt64Array.from(ids, (_, i) => BigInt(i)), past, 0)
    const logits = (await session.run(feeds)).logits as ort.Tensor
    const [, positions, v] = logits.dims as [number, number, number]
    const row = (logits.data as Float32Array).subarray((positions - 1) * v, positions * v)
    const top = row.reduce((m, x) => Math.max(m, x), -Infinity)
    const token = theirs[at]
    const gap = token === undefined ? Infinity : top - row[token]!
    return { at, gap, tie: gap <= TIE }
  } finally {
    await session.release()
  }
}
