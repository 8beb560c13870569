/**
 * The training set as token ids, from the corpus stdlib_corpus.py wrote: the tokenizer learned
 * from its training text, then every chunk and chat pair encoded with the tokenizer the node
 * itself loads (@huggingface/tokenizers), so training sees exactly the ids serving will.
 *
 * - A code chunk is cut into spans of whole lines, each at most FIM_SPAN_CHARS (~450 tokens,
 *   so a training window that starts at one (train.py) holds it whole). Each span becomes, with
 *   probability FIM_RATE (seeded), a fill-in-the-middle sample in StarCoder's prefix–suffix–middle
 *   order: `<fim_prefix>` prefix `<fim_suffix>` suffix `<fim_middle>` middle `<|endoftext|>`,
 *   each part encoded on its own, as an editor's request is; the spans between stay the chunk's
 *   plain text, then `<|endoftext|>`. Cutting every span, not one per chunk, gives ~3× the
 *   distinct samples for the same tokens: with one per chunk the model did not learn to read
 *   the suffix. Half the samples cut at two
 *   random characters (a cursor mid-line), half take out 1–4 whole lines (a cursor on a fresh
 *   line, what an editor asks most): with character cuts alone the model rarely saw a middle
 *   that starts a line.
 * - A share of the chat pairs (CHAT_KEEP, seeded) is rendered by the model's own chat template
 *   (the generation prompt), then the answer and `<|im_end|>`. Only a share: their answers repeat
 *   the corpus's own functions, and in full they taught a code fence after every docstring.
 * - The held-out chunks are plain text: the held-out loss is next-token loss on unseen files.
 * Ids are written as little-endian uint16 (`train.bin`, `val.bin`).
 */
import { Template } from '@huggingface/jinja'
import { Tokenizer } from '@huggingface/tokenizers'
import { CHATML_TOOLS_TEMPLATE } from '../../src/model/chatml-template.ts'
import { EOS_TOKEN, IM_END } from '../generate-model/tokenizer-files.ts'
import { uniforms } from '../generate-model/rng.ts'
import { countPieces, trainBpe } from './bpe-train.ts'
import { codeTokenizerFiles, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, SPECIAL_TOKENS } from './code-tokenizer.ts'

export interface Corpus {
  train: string[]
  val: string[]
  chat: Array<{ user: string; assistant: string }>
}

export interface Dataset {
  tokenizerJson: Record<string, unknown>
  tokenizerConfig: Record<string, unknown>
  train: Uint16Array
  val: Uint16Array
}

/** Share of a chunk's spans turned into fill-in-the-middle samples (StarCoder's rate). */
export const FIM_RATE = 0.5
/** Share of fill-in-the-middle samples whose middle is whole lines. */
export const LINE_FIM_SHARE = 0.5
/** The most characters of whole lines one fill-in-the-middle sample spans (~450 tokens). */
export const FIM_SPAN_CHARS = 1500
/** Share of the chat pairs trained on. */
export const CHAT_KEEP = 0.2

export interface FimPieces {
  prefix: string
  middle: string
  suffix: string
}

/** A chunk's pieces in training order: plain text, or a span cut for fill in the middle. */
export type ChunkPiece = { plain: string } | { fim: FimPieces }

/**
 * A chunk cut into consecutive spans of whole lines of at most FIM_SPAN_CHARS (a line longer than
 * that is a span of its own), each a fill-in-the-middle sample with probability FIM_RATE; the
 * spans between are joined back into plain text.
 */
export function fimSplit(chunk: string, rand: () => number): ChunkPiece[] {
  const starts = [...lineStarts(chunk), chunk.length]
  const pieces: ChunkPiece[] = []
  let plain = ''
  for (let i = 0; i < starts.length - 1; ) {
    let j = i + 1
    while (j < starts.length - 1 && starts[j + 1]! - starts[i]! <= FIM_SPAN_CHARS) j++
    const span = chunk.slice(starts[i], starts[j])
    if (rand() < FIM_RATE) {
      if (plain !== '') pieces.push({ plain })
      plain = ''
      pieces.push({ fim: fimPieces(span, rand) })
    } else plain += span
    i = j
  }
  if (plain !== '') pieces.push({ plain })
  return pieces
}

/** Where each line of `text` starts (the first at 0; none after a final line break). */
function lineStarts(text: string): number[] {
  const starts = [0]
  for (let i = text.indexOf('\n'); i !== -1 && i + 1 < text.length; i = text.indexOf('\n', i + 1)) starts.push(i + 1)
  return starts
}

/** A chunk cut for fill in the middle: at two random characters, or around 1–4 whole lines. */
export function fimPieces(chunk: string, rand: () => number): FimPieces {
  let a: number
  let b: number
  if (rand() < LINE_FIM_SHARE) {
    const starts = lineStarts(chunk)
    const first = Math.floor(rand() * starts.length)
    const last = first + 1 + Math.floor(rand() * 4)
    a = starts[first]!
    b = last < starts.length ? starts[last]! : chunk.length
  } else {
    ;[a, b] = [Math.floor(rand() * (chunk.length + 1)), Math.floor(rand() * (chunk.length + 1))].sort((x, y) => x - y) as [number, number]
  }
  return { prefix: chunk.slice(0, a), middle: chunk.slice(a, b), suffix: chunk.slice(b) }
}

/** The tokenizer files learned from the corpus's training text (code and chat pairs). */
export function trainTokenizer(corpus: Corpus, opts: { vocabSize: number; contextLength: number }): ReturnType<typeof codeTokenizerFiles> {
  const counts = new Map<string, number>()
  for (const text of corpus.train) countPieces(text, counts)
  for (const pair of corpus.chat) countPieces(`${pair.user}\n${pair.assistant}`, counts)
  return codeTokenizerFiles(trainBpe(counts, opts.vocabSize - SPECIAL_TOKENS.length), opts.contextLength)
}

export function buildDataset(corpus: Corpus, opts: { vocabSize: number; contextLength: number; seed: number }): Dataset {
  const files = trainTokenizer(corpus, opts)
  const tokenizer = new Tokenizer(files.tokenizerJson, files.tokenizerConfig)
  const id = (token: string) => tokenizer.token_to_id(token)!
  const [eos, imEnd, pre, mid, suf] = [id(EOS_TOKEN), id(IM_END), id(FIM_PREFIX), id(FIM_MIDDLE), id(FIM_SUFFIX)]
  const enc = (text: string) => (text === '' ? [] : tokenizer.encode(text, { add_special_tokens: false }).ids)
  const rand = uniforms(opts.seed)
  const train: number[] = []
  for (const chunk of corpus.train) {
    for (const piece of fimSplit(chunk, rand)) {
      if ('plain' in piece) {
        if (piece.plain.trim() !== '') train.push(...enc(piece.plain), eos)
      } else train.push(pre, ...enc(piece.fim.prefix), suf, ...enc(piece.fim.suffix), mid, ...enc(piece.fim.middle), eos)
    }
  }
  const template = new Template(CHATML_TOOLS_TEMPLATE)
  for (const pair of corpus.chat) {
    if (rand() >= CHAT_KEEP) continue
    const prompt = template.render({ messages: [{ role: 'user', content: pair.user }], add_generation_prompt: true })
    train.push(...enc(prompt), ...enc(pair.assistant), imEnd, ...enc('\n'), eos)
  }
  const val: number[] = []
  for (const chunk of corpus.val) val.push(...enc(chunk), eos)
  return { ...files, train: Uint16Array.from(train), val: Uint16Array.from(val) }
}
