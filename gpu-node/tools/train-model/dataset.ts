/**
 * The training set as token ids, from the corpus stdlib_corpus.py wrote: the tokenizer learned
 * from its training text, then every chunk and chat pair encoded with the tokenizer the node
 * itself loads (@huggingface/tokenizers), so training sees exactly the ids serving will.
 *
 * - A code chunk becomes, half the time (seeded), a fill-in-the-middle sample in StarCoder's
 *   prefix–suffix–middle order, cut at two random characters: `<fim_prefix>` prefix
 *   `<fim_suffix>` suffix `<fim_middle>` middle `<|endoftext|>` — each part encoded on its own,
 *   as an editor's request is; otherwise the chunk, then `<|endoftext|>`.
 * - A chat pair is rendered by the model's own chat template (the generation prompt), then the
 *   answer and `<|im_end|>`.
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
      const [a, b] = [Math.floor(rand() * (chunk.length + 1)), Math.floor(rand() * (chunk.length + 1))].sort((x, y) => x - y) as [number, number]
      train.push(pre, ...enc(chunk.slice(0, a)), suf, ...enc(chunk.slice(b)), mid, ...enc(chunk.slice(a, b)), eos)
    } else train.push(...enc(chunk), eos)
  }
  const template = new Template(CHATML_TOOLS_TEMPLATE)
  for (const pair of corpus.chat) {
    const prompt = template.render({ messages: [{ role: 'user', content: pair.user }], add_generation_prompt: true })
    train.push(...enc(prompt), ...enc(pair.assistant), imEnd, ...enc('\n'), eos)
  }
  const val: number[] = []
  for (const chunk of corpus.val) val.push(...enc(chunk), eos)
  return { ...files, train: Uint16Array.from(train), val: Uint16Array.from(val) }
}
