import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { readModelDir } from './model-dir.ts'
import { ModelTokenizer } from './tokenizer.ts'

/**
 * tokenizer_config.json's add_bos_token / add_eos_token over tokenizer.json's post-processor, as
 * transformers applies them: a declared flag decides, an undeclared one keeps the post-processor's
 * choice. The tiny model's tokenizer (GPT-2 byte-level BPE; <|endoftext|> is id 509) with its
 * config edited, and a Llama-style post-processor that prepends BOS itself.
 */
const TINY = 'models/tiny'
const BOS = 509
const roots: string[] = []
afterAll(() => roots.forEach((r) => rmSync(r, { recursive: true, force: true })))

/** A copy of the tiny model's directory with tokenizer_config.json (and tokenizer.json) edited. */
function tokenizerWith(config: Record<string, unknown>, tokenizerJson?: (t: Record<string, unknown>) => void): ModelTokenizer {
  const root = mkdtempSync(join(tmpdir(), 'zl-tokenizer-'))
  roots.push(root)
  for (const f of ['model.onnx', 'config.json', 'generation_config.json']) symlinkSync(resolve(TINY, f), join(root, f))
  const base = JSON.parse(readFileSync(join(TINY, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>
  writeFileSync(join(root, 'tokenizer_config.json'), JSON.stringify({ ...base, ...config }))
  const tok = JSON.parse(readFileSync(join(TINY, 'tokenizer.json'), 'utf8')) as Record<string, unknown>
  tokenizerJson?.(tok)
  writeFileSync(join(root, 'tokenizer.json'), JSON.stringify(tok))
  return new ModelTokenizer(readModelDir(root))
}

/** A post-processor that puts BOS before every sequence (Llama's tokenizer.json). */
function prependsBos(t: Record<string, unknown>): void {
  t.post_processor = {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: '<|endoftext|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [BOS], tokens: ['<|endoftext|>'] } },
  }
}

const TEXT = 'Hello there'
const raw = new ModelTokenizer(readModelDir(TINY)).encodeTemplate(TEXT)

describe('plain text and the BOS/EOS of tokenizer_config.json', () => {
  it('keeps the post-processor when neither flag is declared', () => {
    expect(raw.length).toBeGreaterThan(1)
    expect(raw).not.toContain(BOS)
    expect(tokenizerWith({ add_bos_token: undefined }).encodeText(TEXT)).toEqual(raw)
    expect(tokenizerWith({ add_bos_token: undefined }, prependsBos).encodeText(TEXT)).toEqual([BOS, ...raw])
  })

  it('adds BOS for add_bos_token: true once, whether or not the post-processor adds it', () => {
    expect(tokenizerWith({ add_bos_token: true }).encodeText(TEXT)).toEqual([BOS, ...raw])
    expect(tokenizerWith({ add_bos_token: true }, prependsBos).encodeText(TEXT)).toEqual([BOS, ...raw])
  })

  it('drops the post-processor’s BOS for add_bos_token: false', () => {
    expect(tokenizerWith({ add_bos_token: false }, prependsBos).encodeText(TEXT)).toEqual(raw)
  })

  it('appends EOS for add_eos_token: true, and the undeclared BOS stays the post-processor’s', () => {
    expect(tokenizerWith({ add_bos_token: undefined, add_eos_token: true }, prependsBos).encodeText(TEXT)).toEqual([BOS, ...raw, BOS])
  })

  it('reads a special token written as an AddedToken object', () => {
    expect(tokenizerWith({ add_bos_token: true, bos_token: { content: '<|endoftext|>', special: true } }).encodeText(TEXT)).toEqual([BOS, ...raw])
  })

  it('fails at load, naming the file, when the flag asks for a token tokenizer.json lacks', () => {
    expect(() => tokenizerWith({ add_bos_token: true, bos_token: '<s>' })).toThrow(/tokenizer_config\.json: add_bos_token is true but bos_token is not one token/)
    expect(() => tokenizerWith({ add_eos_token: true, eos_token: null })).toThrow(/eos_token is not set/)
  })

  it('leaves chat-template text alone: the template carries its own special tokens', () => {
    expect(tokenizerWith({ add_bos_token: true }, prependsBos).encodeTemplate(TEXT)).toEqual(raw)
  })
})

describe('fill in the middle (completions suffix)', () => {
  /** The tiny tokenizer with FIM tokens added, as `names` spell them. */
  const withFim = (names: readonly string[]) =>
    tokenizerWith({ add_bos_token: true }, (t) => {
      const added = t.added_tokens as Array<Record<string, unknown>>
      names.forEach((content, i) => added.push({ id: 600 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }))
    })

  it('builds prefix–suffix–middle from the model’s FIM tokens, each text encoded on its own, after the model’s BOS', () => {
    const tok = withFim(['<fim_prefix>', '<fim_suffix>', '<fim_middle>'])
    expect(tok.encodeInfill('def f(x):\n    ', '\n    return y')).toEqual([BOS, 600, ...tok.encodeTemplate('def f(x):\n    '), 601, ...tok.encodeTemplate('\n    return y'), 602])
    expect(tok.encodeInfill('', 'end')).toEqual([BOS, 600, 601, ...tok.encodeTemplate('end'), 602])
    // Qwen2.5-Coder's names work the same way.
    const qwen = withFim(['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'])
    expect(qwen.encodeInfill('a', 'b')).toEqual([BOS, 600, ...qwen.encodeTemplate('a'), 601, ...qwen.encodeTemplate('b'), 602])
  })

  it('a model without FIM tokens: a 400 naming suffix', () => {
    expect(() => new ModelTokenizer(readModelDir(TINY)).encodeInfill('a', 'b')).toThrow(expect.objectContaining({ code: 'invalid_request', param: 'suffix' }))
  })
})
