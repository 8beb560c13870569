/**
 * tokenizer.json (Hugging Face byte-level BPE, GPT-2 conventions) and tokenizer_config.json
 * (special tokens, ChatML chat template) for a generated model. The BPE vocabulary plus the
 * three added special tokens add up to the model's vocab_size exactly; the specials take the
 * last three ids.
 */

import { buildBpeVocab, type BpeVocab } from './bpe-vocab.ts'
import { CHATML_TOOLS_TEMPLATE } from '../../src/model/chatml-template.ts'

export const EOS_TOKEN = '<|endoftext|>'
export const IM_START = '<|im_start|>'
export const IM_END = '<|im_end|>'
const SPECIAL_TOKENS = [EOS_TOKEN, IM_START, IM_END] as const

/** ChatML, with tools as Qwen2.5 renders them; string content or OpenAI-style text parts; honours add_generation_prompt. */
export const CHAT_TEMPLATE = CHATML_TOOLS_TEMPLATE

export interface SpecialTokenIds {
  eos: number
  imStart: number
  imEnd: number
}

export interface TokenizerFiles {
  tokenizerJson: Record<string, unknown>
  tokenizerConfig: Record<string, unknown>
  specialIds: SpecialTokenIds
  /** id -> byte-level string for every non-special id (length vocabSize - 3). */
  bpeTokens: string[]
}

/**
 * A byte-level BPE's tokenizer.json with `specials` as added special tokens in the ids after it.
 * `split`: a pre-tokenizer pattern of its own (a Split, then ByteLevel without its regex, as
 * Llama 3's and Qwen2's tokenizer.json write it); without one, GPT-2's (ByteLevel `use_regex`).
 */
export function byteLevelTokenizerJson(bpe: BpeVocab, specials: readonly string[], split?: string): { tokenizerJson: Record<string, unknown>; addedTokens: Array<Record<string, unknown> & { id: number }> } {
  const addedTokens = specials.map((content, i) => ({
    id: bpe.tokens.length + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }))
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: split === undefined ? byteLevel : { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: split }, behavior: 'Isolated', invert: false }, { ...byteLevel, use_regex: false }] },
    post_processor: { ...byteLevel, trim_offsets: false },
    decoder: byteLevel,
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
      fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab: Object.fromEntries(bpe.tokens.map((t, id) => [t, id])),
      // "left right" strings: the format every tokenizers version reads (byte-level tokens never contain spaces).
      merges: bpe.merges.map(([a, b]) => `${a} ${b}`),
    },
  }
  return { tokenizerJson, addedTokens }
}

export function buildTokenizerFiles(vocabSize: number, modelMaxLength: number): TokenizerFiles {
  const bpe = buildBpeVocab(vocabSize - SPECIAL_TOKENS.length)
  const firstSpecial = bpe.tokens.length
  const { tokenizerJson, addedTokens } = byteLevelTokenizerJson(bpe, SPECIAL_TOKENS)
  const tokenizerConfig = {
    tokenizer_class: 'GPT2Tokenizer',
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(addedTokens.map(({ id, ...rest }) => [String(id), rest])),
    bos_token: EOS_TOKEN,
    eos_token: EOS_TOKEN,
    unk_token: EOS_TOKEN,
    pad_token: EOS_TOKEN,
    additional_special_tokens: [IM_START, IM_END],
    chat_template: CHAT_TEMPLATE,
    // Decoding must give back exactly what was encoded (" ." must stay " .").
    clean_up_tokenization_spaces: false,
    errors: 'replace',
    model_max_length: modelMaxLength,
  }
  return {
    tokenizerJson,
    tokenizerConfig,
    specialIds: { eos: firstSpecial, imStart: firstSpecial + 1, imEnd: firstSpecial + 2 },
    bpeTokens: bpe.tokens,
  }
}
