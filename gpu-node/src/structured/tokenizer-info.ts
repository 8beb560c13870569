/**
 * What xgrammar needs to know of a model's tokenizer: every token id's text as tokenizer.json
 * writes it (its "encoded" form), how that encoding maps to bytes, and whether the tokenizer puts
 * a space before the text — read from tokenizer.json the way xgrammar's own
 * TokenizerInfo.from_huggingface reads it:
 * - `byte_level`: the decoder is ByteLevel (GPT-2, Llama 3, Qwen2: every byte is one printable
 *   character, `Ġ` for a space);
 * - `byte_fallback`: the decoder has a ByteFallback step (SentencePiece-style, `<0x0A>` for a byte,
 *   `▁` for a space);
 * - `raw`: the text is the token.
 * Special tokens (added tokens marked special) and ids past the tokenizer's vocabulary (a padded
 * vocab_size) get an empty text: xgrammar then never allows them inside a grammar, so a
 * constrained answer cannot contain a control token the detokenizer would drop.
 */
export type VocabType = 'byte_level' | 'byte_fallback' | 'raw'

export interface EncodedVocab {
  /** Index = token id, `vocabSize` entries. */
  tokens: string[]
  vocabType: VocabType
  prependSpace: boolean
}

interface Piece {
  type?: string
  [key: string]: unknown
}

export function encodedVocab(tokenizerJson: Record<string, unknown>, vocabSize: number): EncodedVocab {
  const tokens = new Array<string>(vocabSize).fill('')
  const model = (tokenizerJson.model ?? {}) as Piece
  const vocab = model.vocab
  if (Array.isArray(vocab)) {
    // Unigram: [piece, score] pairs in id order.
    vocab.forEach((entry, id) => {
      if (id < vocabSize && Array.isArray(entry) && typeof entry[0] === 'string') tokens[id] = entry[0]
    })
  } else if (vocab && typeof vocab === 'object') {
    for (const [text, id] of Object.entries(vocab as Record<string, unknown>)) {
      if (typeof id === 'number' && id >= 0 && id < vocabSize) tokens[id] = text
    }
  }
  for (const added of (tokenizerJson.added_tokens ?? []) as Array<{ id?: unknown; content?: unknown; special?: unknown }>) {
    if (typeof added.id !== 'number' || added.id < 0 || added.id >= vocabSize) continue
    tokens[added.id] = added.special === true || typeof added.content !== 'string' ? '' : added.content
  }
  return { tokens, vocabType: vocabTypeOf(tokenizerJson.decoder as Piece | null | undefined), prependSpace: prependsSpace(tokenizerJson) }
}

function vocabTypeOf(decoder: Piece | null | undefined): VocabType {
  if (!decoder) return 'raw'
  if (decoder.type === 'ByteLevel') return 'byte_level'
  const steps = decoder.type === 'Sequence' && Array.isArray(decoder.decoders) ? (decoder.decoders as Piece[]) : [decoder]
  if (steps.some((d) => d?.type === 'ByteFallback')) return 'byte_fallback'
  if (steps.some((d) => d?.type === 'ByteLevel')) return 'byte_level'
  return 'raw'
}

/** SentencePiece-style tokenizers that put `▁` before the text: a Prepend normalizer or a Metaspace pre-tokenizer that adds it. */
function prependsSpace(tokenizerJson: Record<string, unknown>): boolean {
  const normalizers = flatten(tokenizerJson.normalizer as Piece | null | undefined, 'normalizers')
  if (normalizers.some((n) => n.type === 'Prepend' && n.prepend === '▁')) return true
  const pre = flatten(tokenizerJson.pre_tokenizer as Piece | null | undefined, 'pretokenizers')
  return pre.some((p) => p.type === 'Metaspace' && (p.prepend_scheme === 'always' || p.prepend_scheme === 'first' || (p.prepend_scheme === undefined && p.add_prefix_space === true)))
}

function flatten(piece: Piece | null | undefined, key: string): Piece[] {
  if (!piece) return []
  if (piece.type === 'Sequence' && Array.isArray(piece[key])) return piece[key] as Piece[]
  return [piece]
}

/** GPT-2's byte-level alphabet: the printable character that stands for each byte. */
function byteLevelChars(): Map<string, number> {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)
  const map = new Map<string, number>()
  let extra = 0
  for (let b = 0; b < 256; b++) map.set(String.fromCodePoint(printable(b) ? b : 256 + extra++), b)
  return map
}

const UTF8 = new TextEncoder()
const BYTE_FALLBACK = /^<0x([0-9A-Fa-f]{2})>$/

/** The bytes a token stands for (empty for a special or padded id). */
export function tokenBytes(vocab: EncodedVocab): Uint8Array[] {
  const chars = vocab.vocabType === 'byte_level' ? byteLevelChars() : undefined
  return vocab.tokens.map((text) => {
    if (chars) return Uint8Array.from([...text], (c) => chars.get(c) ?? 0x3f)
    const byte = vocab.vocabType === 'byte_fallback' ? BYTE_FALLBACK.exec(text) : null
    if (byte) return Uint8Array.of(parseInt(byte[1]!, 16))
    return UTF8.encode(vocab.vocabType === 'byte_fallback' ? text.replaceAll('▁', ' ') : text)
  })
}

/**
 * Tokens holding a control byte (U+0000–U+001F). Compact JSON never contains one raw (inside a
 * string it must be escaped, and there is no whitespace between tokens), but xgrammar's rule for a
 * length-bounded string (`[^"\\\r\n]{0,n}`) lets such bytes through: JSON constraints ban them.
 */
export function controlByteTokens(vocab: EncodedVocab): number[] {
  const ids: number[] = []
  tokenBytes(vocab).forEach((bytes, id) => {
    if (bytes.some((b) => b < 0x20)) ids.push(id)
  })
  return ids
}

/**
 * A token's text and bytes, as log-probability entries show them (OpenAI's `token`, `bytes`): the
 * bytes it stands for, and their UTF-8 reading (a part of a character reads as U+FFFD). Built on
 * first use: most requests never ask.
 */
export function tokenPieces(vocab: EncodedVocab): (id: number) => { token: string; bytes: number[] } {
  let bytes: Uint8Array[] | undefined
  const utf8 = new TextDecoder()
  return (id) => {
    bytes ??= tokenBytes(vocab)
    const b = bytes[id] ?? new Uint8Array(0)
    return { token: utf8.decode(b), bytes: [...b] }
  }
}
