/**
 * Draft tokens by prompt lookup (vLLM's n-gram proposer, "prompt lookup decoding"): the
 * sequence's last n tokens are looked for earlier in its own tokens (prompt and output), and the
 * tokens that followed that occurrence are the draft. Longer n-grams are tried first (they name
 * the place more surely); of one length, the latest occurrence wins (the text the model is
 * copying now, not a stale one). No model runs: a draft costs a scan of the sequence.
 */

/** The longest n-gram looked up; shorter ones down to MIN_NGRAM are tried when it is not found. */
export const MAX_NGRAM = 4
export const MIN_NGRAM = 1

/** A draft and the length of the n-gram that found it (a longer match is a surer draft). */
export interface Draft {
  tokens: number[]
  ngram: number
}

/**
 * `maxDraft` tokens that followed the latest earlier occurrence of `tokens`' last n tokens (n from
 * MAX_NGRAM down to MIN_NGRAM), or undefined when none occurs.
 */
export function proposeDraft(tokens: readonly number[], maxDraft: number, maxNgram = MAX_NGRAM, minNgram = MIN_NGRAM): Draft | undefined {
  const len = tokens.length
  if (maxDraft <= 0) return undefined
  for (let n = Math.min(maxNgram, len - 1); n >= minNgram; n--) {
    const at = latestOccurrence(tokens, n)
    if (at < 0) continue
    // The occurrence ends at at + n; what followed it is the draft. Where that runs into the
    // sequence's end, the text repeats with the period the match found (len − from): the draft
    // continues from its own start, as a loop or a run of one token does.
    const from = at + n
    const draft: number[] = []
    for (let j = 0; j < maxDraft; j++) draft.push(from + j < len ? tokens[from + j]! : draft[from + j - len]!)
    return { tokens: draft, ngram: n }
  }
  return undefined
}

/**
 * The start of the latest occurrence of the last `n` tokens strictly before the suffix itself
 * (it may overlap it: a run of one repeated token drafts more of it), or -1.
 */
function latestOccurrence(tokens: readonly number[], n: number): number {
  const len = tokens.length
  const last = tokens[len - 1]
  for (let start = len - n - 1; start >= 0; start--) {
    if (tokens[start + n - 1] !== last) continue
    let i = 0
    while (i < n - 1 && tokens[start + i] === tokens[len - n + i]) i++
    if (i === n - 1) return start
  }
  return -1
}
