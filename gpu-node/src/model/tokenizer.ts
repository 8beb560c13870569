import { Tokenizer } from '@huggingface/tokenizers'
import { ApiError } from '../../../shared/src/api-error.ts'
import { ModelDirError, type ModelDir } from './model-dir.ts'

/**
 * Fill-in-the-middle tokens, prefix–suffix–middle order, as code models name them: StarCoder's
 * (and this repository's trained model's), and Qwen2.5-Coder's. The first family whose three
 * tokens are all single tokens of the vocabulary is the model's.
 */
const FIM_FAMILIES = [
  ['<fim_prefix>', '<fim_suffix>', '<fim_middle>'],
  ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'],
] as const

/**
 * The model's tokenizer.json through @huggingface/tokenizers (pure JS, no native code). Its
 * `decode` is what the engine's detokenizer needs (engine/detokenizer.ts `TokenDecoder`); the
 * composition root hands it over, so the model side never imports the engine.
 */
export class ModelTokenizer {
  private readonly tokenizer: Tokenizer
  /** Plain text's leading and trailing special tokens, when tokenizer_config.json decides them. */
  private readonly affixes?: { prefix: number[]; suffix: number[] }
  /** The model's FIM tokens (prefix, suffix, middle), if it has them. */
  private readonly fim?: readonly [number, number, number]

  constructor(dir: ModelDir) {
    this.tokenizer = new Tokenizer(dir.tokenizerJson, dir.tokenizerConfig)
    for (const family of FIM_FAMILIES) {
      const ids = family.map((t) => this.tokenizer.token_to_id(t))
      if (ids.every((id) => id !== undefined)) {
        this.fim = ids as [number, number, number]
        break
      }
    }
    const { addBos, addEos, tokens } = dir.specials
    if (addBos === undefined && addEos === undefined) return
    // transformers rebuilds the post-processor from the declared flags; an undeclared one keeps
    // what tokenizer.json's post-processor does. Read that off a probe: pre ⧺ "a" ⧺ post.
    const raw = this.tokenizer.encode('a', { add_special_tokens: false }).ids
    const full = this.tokenizer.encode('a').ids
    const at = indexOfRun(full, raw)
    const pre = at < 0 ? [] : full.slice(0, at)
    const post = at < 0 ? [] : full.slice(at + raw.length)
    this.affixes = {
      prefix: addBos === undefined ? pre : addBos ? [this.specialId(tokens.bos_token, 'bos_token', 'add_bos_token')] : [],
      suffix: addEos === undefined ? post : addEos ? [this.specialId(tokens.eos_token, 'eos_token', 'add_eos_token')] : [],
    }
  }

  /** Plain text, with the special tokens the model adds to it (e.g. Llama's BOS). */
  encodeText(text: string): number[] {
    if (!this.affixes) return this.tokenizer.encode(text).ids
    return [...this.affixes.prefix, ...this.tokenizer.encode(text, { add_special_tokens: false }).ids, ...this.affixes.suffix]
  }

  /**
   * `<fim_prefix>` prefix `<fim_suffix>` suffix `<fim_middle>`, each text encoded on its own (as
   * such models are trained), after the model's leading special tokens: the model writes the middle.
   */
  encodeInfill(prefix: string, suffix: string): number[] {
    if (!this.fim) throw new ApiError('invalid_request', "'suffix' needs a model trained to fill in the middle; this model has no FIM tokens.", { param: 'suffix' })
    const [pre, suf, mid] = this.fim
    const raw = (text: string) => (text === '' ? [] : this.tokenizer.encode(text, { add_special_tokens: false }).ids)
    return [...(this.affixes?.prefix ?? []), pre, ...raw(prefix), suf, ...raw(suffix), mid]
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

  /** The id of a special token's text: it must be one token of tokenizer.json. */
  private specialId(text: string | undefined, name: string, flag: string): number {
    const ids = text === undefined ? [] : this.tokenizer.encode(text, { add_special_tokens: false }).ids
    if (ids.length !== 1) throw new ModelDirError('tokenizer_config.json', `${flag} is true but ${name} ${text === undefined ? 'is not set' : 'is not one token of tokenizer.json'}`)
    return ids[0]!
  }
}

/** Where `run` starts inside `xs`, or -1. */
function indexOfRun(xs: number[], run: number[]): number {
  for (let i = 0; i + run.length <= xs.length; i++) if (run.every((x, j) => xs[i + j] === x)) return i
  return -1
}
