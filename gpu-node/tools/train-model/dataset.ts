/**
 * The training set as token ids, from the corpus stdlib_corpus.py wrote: the tokenizer learned
 * from its training text, then every chunk and chat pair encoded with the tokenizer the node
 * itself loads (@huggingface/tokenizers), so training sees exactly the ids serving will.
 *
 * - A code chunk becomes, half the time (seeded), a fill-in-the-middle sample in StarCoder's
 *   prefix–suffix–middle order: `<fim_prefix>` prefix `<fim_suffix>` suffix `<fim_middle>` middle
 *   `<|endoftext|>`, each part encoded on its own, as an editor's request is; otherwise the chunk,
 *   then `<|endoftext|>`. Half the samples cut at two random characters (a cursor mid-line), half
 *   take out 1–4 whole lines (a cursor on a fresh line, what an editor asks most): with
 *   character cuts alone the model rarely saw a middle that starts a line. A sample spans at most
 *   FIM_SPAN_CHARS of its chunk (the lines around the cut; the lines before and after it are
 *   plain samples of their own), so a training window that starts at it (train.py) holds it
 *   whole: prefix, suffix and the middle they predict.
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

/** Share of code chunks turned into fill-in-the-middle samples (StarCoder's rate). */
export const FIM_RATE = 0.5
/** Share of fill-in-the-middle samples whose middle is whole lines. */
export const LINE_FIM_SHARE = 0.5
/** The most characters of a chunk one fill-in-the-middle sample spans (~450 tokens). */
export const FIM_SPAN_CHARS = 1500
/** Share of the chat pairs trained on. */
export const CHAT_KEEP = 0.2

export interface FimPieces {
  prefix: string
  middle: string
  suffix: string
}

/**
 * A chunk as a fill-in-the-middle sample: the whole lines `span` of at most FIM_SPAN_CHARS
 * (`before` and `after` it are the chunk's other lines), cut at two random characters or around
 * 1–4 whole lines.
 */
export function fimSample(chunk: string, rand: () => number): { before: string; span: FimPieces; after: string } {
  let from = 0
  let to = chunk.length
  if (chunk.length > FIM_SPAN_CHARS) {
    const starts = lineStarts(chunk)
    const fits = starts.filter((s) => s <= chunk.length - FIM_SPAN_CHARS)
    from = fits[Math.floor(rand() * fits.length)] ?? 0
    // The last line start within the span's reach (a line longer than the span is cut mid-line).
    const reach = from + FIM_SPAN_CHARS
    to = starts.filter((s) => s > from && s <= reach).at(-1) ?? reach
  }
  return { before: chunk.slice(0, from), span: fimPieces(chunk.slice(from, to), rand), after: chunk.slice(to) }
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
    if (rand() < FIM_RATE) {
      const { before, span: p, after } = fimSample(chunk, rand)
      if (before !== '') train.push(...enc(before), eos)
      train.push(pre, ...enc(p.prefix), suf, ...enc(p.suffix), mid, ...enc(p.middle), eos)
      if (after.trim() !== '') train.push(...enc(after), eos)
    } else train.push(...enc(chunk), eos)
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
