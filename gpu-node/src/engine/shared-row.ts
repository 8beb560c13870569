import type { DonorRow } from '../model/runner.ts'
import type { Sequence } from './sequence.ts'

/**
 * The most prompt tokens a takeover feeds in a decode step: every row of a ragged step is padded
 * to the widest, so a longer rest is prefilled on its own (from a copy of the row) instead.
 */
export const TAKEOVER_TOKENS = 4

/**
 * The batch row among `rows` of `seq`'s cache salt whose KV holds the most of `seq`'s first
 * tokens, when that is more than `cached` (its block-aligned prefix-cache hit) and at least
 * `floor` (a block: less is no better than a fresh prompt). An editor's next keystroke continues
 * the request it supersedes past the last whole block; the prefix cache keeps whole blocks only.
 * At least the prompt's last token is left to compute (its logits).
 */
export function longestSharedRow(seq: Sequence, rows: Iterable<Sequence>, cached: number, floor: number): DonorRow | undefined {
  const most = seq.tokens.length - 1
  let best: DonorRow | undefined
  for (const row of rows) {
    if (row === seq || row.req.cacheSalt !== seq.req.cacheSalt) continue
    const limit = Math.min(most, row.kvLen)
    let n = 0
    while (n < limit && row.tokens[n] === seq.tokens[n]) n++
    if (n > (best?.tokens ?? cached) && n >= floor) best = { seqId: row.seqId, tokens: n }
  }
  return best
}
