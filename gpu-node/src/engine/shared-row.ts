import type { DonorRow } from '../model/runner.ts'
import type { Sequence } from './sequence.ts'

/**
 * The most padding a decode step may take on to feed prompts (takeovers, restores): every row of
 * a ragged step is padded to the widest, plain rows (one token each) included. It is about what a
 * model run of its own costs beyond its tokens, the run a prefill would be instead (zl-code on 2
 * cores: a [16, 1] step takes 12 ms, a [16, 5] one 25 ms). At a batch of 16 a rest of up to 4
 * tokens is fed; into a small batch, a longer one.
 */
export const FED_PADDING_TOKENS = 48

/**
 * Whether a decode step over `plain` one-token rows and rows fed prompts of `fed` tokens can also
 * feed one of `rest`: within FED_PADDING_TOKENS of padding, and no wider in all than the plain
 * rows plus a prefill `chunk` (what a tick with a prefill costs).
 */
export function mayFeed(plain: number, fed: readonly number[], rest: number, chunk: number): boolean {
  const width = Math.max(1, rest, ...fed)
  const rows = plain + fed.length + 1
  const real = plain + rest + fed.reduce((n, t) => n + t, 0)
  return rows * width - real <= FED_PADDING_TOKENS && rows * width <= plain + chunk
}

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
