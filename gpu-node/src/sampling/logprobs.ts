/**
 * Log probabilities as OpenAI reports them, computed beside the sampler from a row's raw logits:
 * the model's own distribution (vLLM's default, `raw_logprobs`), before temperature, penalties,
 * top-k/p and any grammar mask, so they say what the model thought, not what the request's
 * settings made of it.
 */
import type { TokenLogprob } from '../../../shared/src/generation.ts'

/** A token's text and bytes as a log-probability entry shows them. */
export type TokenPiece = (id: number) => { token: string; bytes: number[] }

/** The log-softmax normaliser over the first `vocabSize` logits (a padded vocabulary's tail is no token). */
function logNormaliser(logits: Float32Array, vocabSize: number): number {
  let max = -Infinity
  for (let i = 0; i < vocabSize; i++) if (logits[i]! > max) max = logits[i]!
  let sum = 0
  for (let i = 0; i < vocabSize; i++) sum += Math.exp(logits[i]! - max)
  return max + Math.log(sum)
}

/** The `k` highest logits' token ids, highest first (ties: the lower id first). */
export function topTokens(logits: Float32Array, vocabSize: number, k: number): number[] {
  if (k <= 0) return []
  const ids: number[] = []
  for (let i = 0; i < vocabSize; i++) {
    const v = logits[i]!
    if (ids.length === k && v <= logits[ids[k - 1]!]!) continue
    let at = ids.length === k ? k - 1 : ids.length
    while (at > 0 && logits[ids[at - 1]!]! < v) at--
    ids.splice(at, 0, i)
    if (ids.length > k) ids.pop()
  }
  return ids
}

/** The sampled token's entry: its log probability and the `top` most likely tokens' at the same position. */
export function tokenLogprob(raw: Float32Array, vocabSize: number, token: number, top: number, piece: TokenPiece): TokenLogprob {
  const z = logNormaliser(raw, vocabSize)
  return {
    ...piece(token),
    logprob: raw[token]! - z,
    top: topTokens(raw, vocabSize, top).map((id) => ({ ...piece(id), logprob: raw[id]! - z })),
  }
}
