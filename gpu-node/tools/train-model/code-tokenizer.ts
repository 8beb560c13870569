/**
 * The trained model's tokenizer files: a byte-level BPE learned from the training corpus
 * (bpe-train.ts), then the special tokens in the last ids — end of text, ChatML's turn markers,
 * and StarCoder's fill-in-the-middle tokens — with GPT-2's conventions otherwise, as
 * tokenizer-files.ts writes them for the generated presets. The chat template is ChatML with
 * tools (Qwen2.5's rendering, chatml-template.ts).
 */
import { CHATML_TOOLS_TEMPLATE } from '../../src/model/chatml-template.ts'
import type { BpeVocab } from '../generate-model/bpe-vocab.ts'
import { CODE_PATTERN } from './bpe-train.ts'
import { byteLevelTokenizerJson, EOS_TOKEN, IM_END, IM_START } from '../generate-model/tokenizer-files.ts'

/** StarCoder's names: what editors' FIM prompts and Codestral-style servers use. */
export const FIM_PREFIX = '<fim_prefix>'
export const FIM_MIDDLE = '<fim_middle>'
export const FIM_SUFFIX = '<fim_suffix>'
export const FIM_PAD = '<fim_pad>'
export const SPECIAL_TOKENS = [EOS_TOKEN, IM_START, IM_END, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD] as const

export function codeTokenizerFiles(bpe: BpeVocab, modelMaxLength: number): { tokenizerJson: Record<string, unknown>; tokenizerConfig: Record<string, unknown> } {
  const { tokenizerJson, addedTokens: added } = byteLevelTokenizerJson(bpe, SPECIAL_TOKENS, CODE_PATTERN)
  return {
    tokenizerJson,
    tokenizerConfig: {
      tokenizer_class: 'GPT2Tokenizer',
      add_bos_token: false,
      add_prefix_space: false,
      added_tokens_decoder: Object.fromEntries(added.map(({ id, ...rest }) => [String(id), rest])),
      bos_token: EOS_TOKEN,
      eos_token: EOS_TOKEN,
      unk_token: EOS_TOKEN,
      pad_token: FIM_PAD,
      additional_special_tokens: [IM_START, IM_END, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD],
      chat_template: CHATML_TOOLS_TEMPLATE,
      clean_up_tokenization_spaces: false,
      errors: 'replace',
      model_max_length: modelMaxLength,
    },
  }
}
