/**
 * A deterministic byte-level BPE vocabulary of any size >= 256: the 256 byte symbols, then merges.
 * Merges come first from a list of common English pieces and words (each built by BPE-encoding
 * it with the merges so far and merging until it is one token, so encoding really produces it),
 * then from letter n-grams enumerated level by level in order of English letter frequency.
 * Every merge joins two tokens already in the vocabulary and adds a new one.
 */

import { BYTE_ORDER, BYTE_TO_CHAR, toByteLevel } from './byte-level.ts'

export interface BpeVocab {
  /** id -> byte-level token string. */
  tokens: string[]
  /** In rank order. */
  merges: Array<[string, string]>
}

/** Common English pieces, roughly by frequency; a leading space is part of the piece (GPT-2 style). */
const COMMON_PIECES: readonly string[] = [
  ' t', ' a', 'he', 'in', 're', 'on', ' the', 'er', ' s', 'at', ' w', ' o', 'en', ' c', 'it', 'is', 'an', 'or', 'es',
  ' b', 'ed', ' f', 'ing', ' p', 'ou', ' an', 'al', 'ar', ' to', ' m', ' of', ' in', ' d', ' h', ' and', 'ic', 'as',
  'le', ' th', 'ion', 'om', 'll', 'ent', ' n', ' l', 'st', ' re', 've', ' e', 'ro', 'ly', ' be', ' g', ' T', ' I',
  'ct', ' S', 'id', 'ot', ' y', 'ut', 'et', ' A', 'ow', ' is', ' on', 'im', 'am', 'ay', 'ad', 'se', ' for', ' C',
  'ig', ' M', 'ver', ' that', ' u', 'ith', 'ur', ' P', ' st', ' B', 'ce', 'ation', ' it', ' with', ' W', ' D', ' H',
  ' was', ' you', ' he', ' as', ' R', ' F', ' at', ' his', 'ers', ' are', ' L', 'ter', 'ill', 'ain', 'ir', ' this',
  ' N', ' E', ' by', ' we', ' from', ' or', ' not', ' have', ' but', ' they', ' which', ' one', ' all', ' she',
  ' there', ' their', ' will', ' can', ' has', ' her', ' been', ' would', ' more', ' if', ' what', ' so', ' about',
  ' who', ' up', ' out', ' new', ' time', ' some', ' when', ' them', ' other', ' were', ' my', ' also', ' like',
  ' just', ' into', ' than', ' only', ' its', ' could', ' any', ' our', ' said', ' no', ' do', ' your', ' me',
  ' how', ' first', ' two', ' these', ' may', ' after', ' then', ' over', ' people', ' world', ' make', ' work',
  ' most', ' years', ' because', ' good', ' well', ' very', ' through', ' where', ' much', ' know', ' day',
  ' here', ' should', ' even', ' year', ' way', ' see', ' use', ' many', ' those', ' back', ' him', ' get',
  ' made', ' model', ' token', ' data', ' text', ' hello', ' Hello', ' The', ' It', ' In', ' This', ' We',
  ' You', ' He', ' She', ' They', 'The', 'It', 'In', 'This', 'tion', 'ment', 'ness', 'est', ' "', ' (', '."',
  '),', "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", '  ', '    ', '\n\n', '00', '000', ' 1', ' 2', ' 19', ' 20',
  '...',
]

/** English letters by frequency: the cost of a letter in the n-gram enumeration is its rank here. */
const LETTERS_BY_FREQUENCY = 'etaoinshrdlcumwfgypbvkjxqz'
const SPACE = BYTE_TO_CHAR[0x20]

export function buildBpeVocab(size: number): BpeVocab {
  if (size < 256) throw new Error(`a byte-level vocabulary needs at least 256 tokens, got ${size}`)
  const vocab = new VocabBuilder(BYTE_ORDER.map((b) => BYTE_TO_CHAR[b]))
  for (const piece of COMMON_PIECES) {
    if (vocab.size >= size) break
    vocab.addWord(toByteLevel(piece), size)
  }
  for (let level = 2; vocab.size < size; level++) {
    for (const [left, right] of ngramCandidates(vocab, level)) {
      if (vocab.size >= size) break
      vocab.addMerge(left, right)
    }
  }
  return { tokens: vocab.tokens, merges: vocab.merges }
}

class VocabBuilder {
  readonly tokens: string[]
  readonly merges: Array<[string, string]> = []
  readonly known: Set<string>
  private readonly ranks = new Map<string, number>()

  constructor(initial: string[]) {
    this.tokens = [...initial]
    this.known = new Set(initial)
  }

  get size(): number {
    return this.tokens.length
  }

  addMerge(left: string, right: string): void {
    const merged = left + right
    if (!this.known.has(left) || !this.known.has(right)) throw new Error(`merge parts missing: ${left} ${right}`)
    if (this.known.has(merged)) return
    this.ranks.set(pairKey(left, right), this.merges.length)
    this.merges.push([left, right])
    this.tokens.push(merged)
    this.known.add(merged)
  }

  /** Adds merges until BPE encodes `word` (byte-level string) as one token, or the vocabulary is full. */
  addWord(word: string, limit: number): void {
    for (let parts = this.encode(word); parts.length > 1 && this.size < limit; parts = this.encode(word)) {
      this.addMerge(parts[0], parts[1])
    }
  }

  /** Plain BPE: repeatedly merge the adjacent pair of lowest rank (leftmost on ties). */
  private encode(word: string): string[] {
    const parts = Array.from(word)
    for (;;) {
      let best = -1
      let bestRank = Infinity
      for (let i = 0; i + 1 < parts.length; i++) {
        const rank = this.ranks.get(pairKey(parts[i], parts[i + 1]))
        if (rank !== undefined && rank < bestRank) {
          bestRank = rank
          best = i
        }
      }
      if (best < 0) return parts
      parts.splice(best, 2, parts[best] + parts[best + 1])
    }
  }
}

const pairKey = (a: string, b: string): string => `${a}\u0000${b}`

/**
 * Candidate merges producing tokens of `level` characters: [Ġ]?[A-Za-z][a-z]* shapes, each an
 * existing (level-1)-character token plus one letter, cheapest (most English-like) first.
 */
function ngramCandidates(vocab: VocabBuilder, level: number): Array<[string, string]> {
  const lower = Array.from(LETTERS_BY_FREQUENCY)
  const upper = lower.map((c) => c.toUpperCase())
  const bases = level === 2 ? [SPACE, ...lower, ...upper] : vocab.tokens.filter((t) => t.length === level - 1 && isWordPiece(t))
  const out: Array<[string, string]> = []
  for (const base of bases) {
    const nexts = base === SPACE ? [...lower, ...upper] : lower
    for (const c of nexts) if (!vocab.known.has(base + c)) out.push([base, c])
  }
  const scored = out.map((pair) => ({ pair, cost: cost(pair[0] + pair[1]), text: pair[0] + pair[1] }))
  scored.sort((a, b) => a.cost - b.cost || (a.text < b.text ? -1 : a.text > b.text ? 1 : 0))
  return scored.map((s) => s.pair)
}

function isWordPiece(t: string): boolean {
  return /^Ġ?[A-Za-z][a-z]*$/.test(t)
}

function cost(text: string): number {
  let total = 0
  for (const c of text) {
    if (c === SPACE) continue
    const lowerRank = LETTERS_BY_FREQUENCY.indexOf(c)
    total += lowerRank >= 0 ? lowerRank : LETTERS_BY_FREQUENCY.indexOf(c.toLowerCase()) + 6
  }
  return total
}
