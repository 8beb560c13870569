import { Tokenizer } from '@huggingface/tokenizers'
import type { ModelDir } from './model-dir.ts'

/**
 * The model's tokenizer.json through @huggingface/tokenizers (pure JS, no native code). Its
 * `decode` is what the engine's detokenizer needs (engine/detokenizer.ts `TokenDecoder`); the
 * composition root hands it over, so the model side never imports the engine.
 */
export class ModelTokenizer {
  private readonly tokenizer: Tokenizer

  constructor(dir: ModelDir) {
    this.tokenizer = new Tokenizer(dir.tokenizerJson, dir.tokenizerConfig)
  }

  /** Plain text, with the tokenizer's own special tokens (e.g. Llama's BOS). */
  encodeText(text: string): number[] {
    return this.tokenizer.encode(text).ids
  }

  /** A rendered chat template already carries its special tokens: add none (as HF's apply_chat_template). */
  encodeTemplate(text: string): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids
  }

  decode(ids: readonly number[]): string {
    // The library throws on an empty list; the detokenizer asks for empty windows routinely.
    if (ids.length === 0) return ''
    return this.tokenizer.decode(ids as number[], { skip_special_tokens: true, clean_up_tokenization_spaces: false })
  }
}
