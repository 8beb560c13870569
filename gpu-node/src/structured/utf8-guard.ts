/**
 * Keeps a constrained sequence's bytes valid UTF-8. A byte-level vocabulary has tokens for single
 * bytes and byte runs that are parts of a character, and xgrammar's character classes let a walk
 * through them stop or turn mid-character, or build a sequence no decoder accepts (overlong, a
 * surrogate): the text then holds U+FFFD where the model wrote half a character, and a string
 * bounded by maxLength (in characters) may come out longer than its schema allows. The guard runs
 * the standard UTF-8 automaton over each token's bytes (precomputed per vocabulary and state) and
 * allows only tokens that keep the text well-formed; a stop token only between characters.
 */

/** Automaton states: 0 between characters; 1–3 that many continuation bytes owed; 4–7 the first one restricted (after E0, ED, F0, F4). */
const STATES = 8
const INVALID = -1

function step(state: number, b: number): number {
  const cont = b >= 0x80 && b <= 0xbf
  switch (state) {
    case 0:
      if (b < 0x80) return 0
      if (b >= 0xc2 && b <= 0xdf) return 1
      if (b === 0xe0) return 4
      if (b === 0xed) return 5
      if (b >= 0xe1 && b <= 0xef) return 2
      if (b === 0xf0) return 6
      if (b >= 0xf1 && b <= 0xf3) return 3
      if (b === 0xf4) return 7
      return INVALID
    case 1:
      return cont ? 0 : INVALID
    case 2:
      return cont ? 1 : INVALID
    case 3:
      return cont ? 2 : INVALID
    case 4:
      return b >= 0xa0 && b <= 0xbf ? 1 : INVALID
    case 5:
      return b >= 0x80 && b <= 0x9f ? 1 : INVALID
    case 6:
      return b >= 0x90 && b <= 0xbf ? 2 : INVALID
    default:
      return b >= 0x80 && b <= 0x8f ? 2 : INVALID
  }
}

/** Per vocabulary: each token's state after it, from each state (INVALID: not allowed). */
export class Utf8Rules {
  private readonly next: Int8Array[]
  /** State 0: the tokens never allowed; other states: the only tokens allowed. */
  private readonly lists: number[][]

  constructor(tokens: readonly Uint8Array[], stopTokens: readonly number[]) {
    const stops = new Set(stopTokens)
    this.next = Array.from({ length: STATES }, (_, from) =>
      Int8Array.from(tokens, (bytes, id) => {
        if (stops.has(id) || bytes.length === 0) return from === 0 ? 0 : INVALID
        let s = from
        for (const b of bytes) if ((s = step(s, b)) === INVALID) break
        return s
      }),
    )
    this.lists = this.next.map((row, from) => {
      const ids: number[] = []
      row.forEach((to, id) => {
        if ((from === 0) === (to === INVALID)) ids.push(id)
      })
      return ids
    })
  }

  /** The state after `token`, or INVALID (-1). */
  after(state: number, token: number): number {
    return this.next[state]![token] ?? INVALID
  }

  allows(state: number, token: number): boolean {
    return this.after(state, token) !== INVALID
  }

  /** Whether some state allows `token` (one no state allows never needs another ban). */
  everAllows(token: number): boolean {
    return this.next.some((row) => row[token] !== INVALID)
  }

  /** Sets the logits of the tokens that may not follow to -Infinity. */
  mask(logits: Float32Array, state: number): void {
    const list = this.lists[state]!
    if (state === 0) {
      for (const t of list) logits[t] = -Infinity
      return
    }
    const kept = list.map((t) => logits[t]!)
    logits.fill(-Infinity)
    list.forEach((t, i) => (logits[t] = kept[i]!))
  }
}
