/**
 * Byte-level BPE trained on a corpus, as Hugging Face tokenizers' BpeTrainer does: the text split
 * by the pre-tokenizer's pattern (CODE_PATTERN, the Split that tokenizer.json applies before
 * ByteLevel), every piece as its byte-level string, then merges of the most
 * frequent adjacent pair until the vocabulary is full. Deterministic: ties go to the pair whose
 * left, then right, token sorts first. Each merge touches only the words that hold the pair.
 */
import { BYTE_ORDER, BYTE_TO_CHAR, toByteLevel } from '../generate-model/byte-level.ts'
import type { BpeVocab } from '../generate-model/bpe-vocab.ts'

/**
 * The pre-tokenizer's pattern: GPT-2's, with line breaks (and the spaces before them) a piece of
 * their own, as Llama 3's and Qwen2's patterns have them. With GPT-2's alone a line break fuses
 * with the next line's indentation ("\n   " then " return"), so a prompt that ends at a line break
 * — an editor's cursor on a new line — ends on a token the model almost never saw there.
 */
export const CODE_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
const PIECES = new RegExp(CODE_PATTERN, 'gu')

/** Pieces of `text` and how often each occurs, added to `counts`. */
export function countPieces(text: string, counts: Map<string, number>): void {
  for (const m of text.matchAll(PIECES)) {
    const piece = toByteLevel(m[0])
    counts.set(piece, (counts.get(piece) ?? 0) + 1)
  }
}

/** A vocabulary of `size` tokens (256 bytes, then merges) learned from piece counts. */
export function trainBpe(counts: ReadonlyMap<string, number>, size: number): BpeVocab {
  const tokens = BYTE_ORDER.map((b) => BYTE_TO_CHAR[b]!)
  const idOf = new Map(tokens.map((t, i) => [t, i]))
  const words: number[][] = []
  const freq: number[] = []
  for (const [piece, n] of counts) {
    words.push(Array.from(piece, (c) => idOf.get(c)!))
    freq.push(n)
  }
  const key = (a: number, b: number) => a * 65536 + b
  const pairCount = new Map<number, number>()
  const where = new Map<number, Set<number>>()
  const add = (a: number, b: number, w: number, n: number) => {
    const k = key(a, b)
    const count = (pairCount.get(k) ?? 0) + n
    if (count > 0) pairCount.set(k, count)
    else pairCount.delete(k)
    if (n > 0) {
      let s = where.get(k)
      if (!s) where.set(k, (s = new Set()))
      s.add(w)
    }
  }
  words.forEach((w, i) => {
    for (let j = 0; j + 1 < w.length; j++) add(w[j]!, w[j + 1]!, i, freq[i]!)
  })
  const merges: Array<[string, string]> = []
  while (tokens.length < size) {
    let best = -1
    let bestCount = 0
    for (const [k, n] of pairCount) {
      if (n > bestCount || (n === bestCount && n > 0 && before(k, best))) {
        best = k
        bestCount = n
      }
    }
    if (best < 0) break
    const a = Math.floor(best / 65536)
    const b = best % 65536
    const id = tokens.length
    tokens.push(tokens[a]! + tokens[b]!)
    merges.push([tokens[a]!, tokens[b]!])
    for (const w of where.get(best) ?? []) {
      const word = words[w]!
      const n = freq[w]!
      // Take the word's pairs out, merge, put its pairs back: simple, and only for words holding the pair.
      for (let j = 0; j + 1 < word.length; j++) add(word[j]!, word[j + 1]!, w, -n)
      const merged: number[] = []
      for (let j = 0; j < word.length; j++) {
        if (j + 1 < word.length && word[j] === a && word[j + 1] === b) {
          merged.push(id)
          j++
        } else merged.push(word[j]!)
      }
      words[w] = merged
      for (let j = 0; j + 1 < merged.length; j++) add(merged[j]!, merged[j + 1]!, w, n)
    }
    pairCount.delete(best)
    where.delete(best)
  }
  return { tokens, merges }

  function before(k: number, than: number): boolean {
    if (than < 0) return true
    const [la, lb] = [tokens[Math.floor(k / 65536)]!, tokens[k % 65536]!]
    const [ra, rb] = [tokens[Math.floor(than / 65536)]!, tokens[than % 65536]!]
    return la < ra || (la === ra && lb < rb)
  }
}
