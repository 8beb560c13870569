/**
 * One sequence's grammar state (an xgrammar matcher): which tokens may come next, and the tokens
 * that came. Masking sets a forbidden token's logit to -Infinity before the sampler sees the row,
 * so a constrained row is sampled exactly as an unconstrained one over the allowed tokens
 * (greedy and seeded rows stay deterministic and batch-independent). The grammar's stop tokens
 * are allowed only once the grammar is complete.
 */
import type { Utf8Rules } from './utf8-guard.ts'
import type { GrammarMatcher } from './xgrammar.ts'

/** What a constraint enforces beside its grammar. */
export interface TokenRules {
  /** Tokens never allowed, whatever the grammar says. */
  banned: ReadonlySet<number>
  /** Keeps the bytes valid UTF-8 (byte-level and byte-fallback vocabularies). */
  utf8?: Utf8Rules
}

export class GrammarConstraint {
  private disposed = false
  /** UTF-8 continuation bytes the text owes (utf8-guard.ts). */
  private owed = 0

  constructor(
    private readonly matcher: GrammarMatcher,
    /** Tokens the bitmask covers; logits past it (a padded vocabulary) are never allowed. */
    private readonly vocabSize: number,
    private readonly rules: TokenRules = { banned: new Set() },
  ) {}

  /** Sets every token the grammar does not allow next to -Infinity. */
  async mask(logits: Float32Array): Promise<void> {
    const bits = await this.matcher.getNextTokenBitmask()
    maskLogits(logits, bits, this.vocabSize)
    for (const t of this.rules.banned) logits[t] = -Infinity
    this.rules.utf8?.mask(logits, this.owed)
  }

  /** Advances the grammar by a token that joined the sequence; false: the grammar or the ban forbids it (nothing changed). */
  accept(token: number): boolean {
    const { banned, utf8 } = this.rules
    if (banned.has(token) || (utf8 && !utf8.allows(this.owed, token))) return false
    if (!this.matcher.acceptToken(token)) return false
    if (utf8) this.owed = utf8.after(this.owed, token)
    return true
  }

  /** The grammar is complete and its stop token was accepted: nothing more may follow. */
  get terminated(): boolean {
    return this.matcher.isTerminated()
  }

  dispose(): void {
    if (this.disposed) return
    this.disposed = true
    this.matcher.dispose()
  }
}

/** logits[t] = -Infinity for every t whose bit is 0 in `bits` (32 tokens a word, low bit first), and past `vocabSize`. */
export function maskLogits(logits: Float32Array, bits: Int32Array, vocabSize: number): void {
  const n = Math.min(logits.length, vocabSize)
  for (let w = 0; w * 32 < n; w++) {
    const word = bits[w]!
    if (word === -1) continue
    const end = Math.min(n, w * 32 + 32)
    if (word === 0) {
      logits.fill(-Infinity, w * 32, end)
      continue
    }
    for (let t = w * 32; t < end; t++) if (((word >>> (t & 31)) & 1) === 0) logits[t] = -Infinity
  }
  logits.fill(-Infinity, n)
}
