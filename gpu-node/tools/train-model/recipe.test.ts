import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Tokenizer } from '@huggingface/tokenizers'
import { afterAll, describe, expect, it } from 'vitest'
import { countPieces, trainBpe } from './bpe-train.ts'
import { codeTokenizerFiles } from './code-tokenizer.ts'
import { trainTokenizer, type Corpus } from './dataset.ts'
import { configFiles, MODEL_DIR, SHAPE } from './recipe.ts'

const tmp = mkdtempSync(join(tmpdir(), 'zl-recipe-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))
const committed = (file: string) => JSON.parse(readFileSync(join(MODEL_DIR, file), 'utf8')) as Record<string, unknown>

describe('byte-level BPE training', () => {
  it('merges the most frequent pair first, ties by token order, and the tokenizer library encodes with the merges', () => {
    const counts = new Map<string, number>()
    countPieces('aab aab aab abc', counts)
    const bpe = trainBpe(counts, 256 + 3)
    // "a a" (3×) and "a b" (4×): "a b" first; then "a ab" (3×) and "Ġ aab"; ties go to the smaller token.
    expect(bpe.merges.slice(0, 2)).toEqual([['a', 'b'], ['a', 'ab']])
    const files = codeTokenizerFiles(bpe, 64)
    const tok = new Tokenizer(files.tokenizerJson, files.tokenizerConfig)
    expect(tok.encode('aab', { add_special_tokens: false }).tokens).toEqual(['aab'])
    expect(tok.decode(tok.encode(' aab abc\n', { add_special_tokens: false }).ids)).toBe(' aab abc\n')
  })
})

describe('the committed model is the one the recipe makes', () => {
  it('its tokenizer is learned from this machine’s standard library; its config is the recipe’s', () => {
    const corpusPath = join(tmp, 'corpus.json')
    const r = spawnSync('/usr/bin/python3', ['gpu-node/tools/train-model/stdlib_corpus.py', corpusPath], { encoding: 'utf8' })
    expect(r.status, r.stderr).toBe(0)
    const corpus = JSON.parse(readFileSync(corpusPath, 'utf8')) as Corpus
    const files = trainTokenizer(corpus, { vocabSize: SHAPE.vocab_size, contextLength: SHAPE.max_position_embeddings })
    expect(files.tokenizerJson).toEqual(committed('tokenizer.json'))
    expect(files.tokenizerConfig).toEqual(committed('tokenizer_config.json'))
    const tok = new Tokenizer(files.tokenizerJson, files.tokenizerConfig)
    const { config, generationConfig } = configFiles((t) => tok.token_to_id(t)!)
    expect(config).toEqual(committed('config.json'))
    expect(generationConfig).toEqual(committed('generation_config.json'))
  }, 120_000)
})
