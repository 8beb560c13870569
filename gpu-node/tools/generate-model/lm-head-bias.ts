/**
 * The fixed bias added to the logits. An untrained model's logits are noise; this bias makes
 * what it writes look like text and gives the end tokens a small, real chance per step, so some
 * generations finish on their own.
 *
 * Tokens fall into classes (word starts " the", word pieces "ing", punctuation/digits,
 * whitespace, unprintable) and each class gets a share of the probability mass whatever its
 * size, so a 512-token and a 32000-token vocabulary both produce words separated by spaces.
 * With logits b_i + LOGIT_STD·z_i, token i's expected softmax share is exp(b_i)/Σexp(b)
 * (the exp(LOGIT_STD·z) factor has the same mean for every token), so b_i = ln(share/count).
 */

import { tokenBytes } from './byte-level.ts'
import type { SpecialTokenIds } from './tokenizer-files.ts'

type TokenClass = 'wordStart' | 'wordPiece' | 'punctuation' | 'whitespace' | 'unprintable'

/** Probability mass per class (renormalised over the classes a vocabulary has). */
const CLASS_SHARE: Record<TokenClass, number> = {
  wordStart: 0.5,
  wordPiece: 0.4,
  punctuation: 0.07,
  whitespace: 0.02,
  // Control bytes and lone UTF-8 fragments (which decode to U+FFFD): about 1 in 5000 tokens.
  unprintable: 0.0002,
}

/** Mean tokens until an end token (EOS or <|im_end|>) under plain sampling. */
const MEAN_TOKENS_TO_END = 150

export function buildVocabBias(bpeTokens: string[], special: SpecialTokenIds): Float32Array {
  const classes = bpeTokens.map((t) => classify(tokenBytes(t)))
  const counts = new Map<TokenClass, number>()
  for (const c of classes) counts.set(c, (counts.get(c) ?? 0) + 1)
  let totalShare = 0
  for (const c of counts.keys()) totalShare += CLASS_SHARE[c]
  const classBias = (c: TokenClass): number => Math.log(CLASS_SHARE[c] / totalShare / (counts.get(c) ?? 1))

  const bias = new Float32Array(bpeTokens.length + 3)
  classes.forEach((c, id) => (bias[id] = classBias(c)))
  // Two end tokens share 1/MEAN_TOKENS_TO_END; both are in generation_config's eos_token_id.
  const endBias = Math.log(1 / MEAN_TOKENS_TO_END / 2)
  bias[special.eos] = endBias
  bias[special.imEnd] = endBias
  bias[special.imStart] = Math.log(CLASS_SHARE.unprintable / 100)
  // Centre on the word-piece bias so logits stay near zero (softmax ignores the offset).
  const centre = classBias('wordPiece')
  for (let i = 0; i < bias.length; i++) bias[i] -= centre
  return bias
}

function classify(bytes: Uint8Array): TokenClass {
  let letters = 0
  let spaces = 0
  for (const b of bytes) {
    if (b >= 0x80 || b === 0x7f || (b < 0x20 && b !== 0x0a)) return 'unprintable'
    if ((b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)) letters++
    else if (b === 0x20 || b === 0x0a) spaces++
  }
  if (letters === 0) return spaces === bytes.length ? 'whitespace' : 'punctuation'
  if (letters + spaces < bytes.length) return 'punctuation'
  return bytes[0] === 0x20 ? 'wordStart' : 'wordPiece'
}
