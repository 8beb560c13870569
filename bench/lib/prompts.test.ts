/**
 * Benchmarks divide a loaded TTFT by an idle one and call prompts "fresh": a prompt of another
 * variant must not continue the prefix cache's blocks of any other.
 */
import { describe, expect, it } from 'vitest'
import { DEFAULT_MODEL_DIR } from '../../gpu-node/src/config.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { DEFAULT_PREFIX_BLOCK_TOKENS } from '../../gpu-node/src/model/runner.ts'
import { ModelTokenizer } from '../../gpu-node/src/model/tokenizer.ts'
import { textPromptOfLength } from './prompts.ts'

describe('prompts of an exact length', () => {
  it('gives each variant its own first block, at the length asked', () => {
    const tok = new ModelTokenizer(readModelDir(DEFAULT_MODEL_DIR))
    for (const length of [48, 96]) {
      const firstBlocks = new Set<string>()
      for (let variant = 0; variant < 40; variant++) {
        const ids = tok.encodeText(textPromptOfLength(DEFAULT_MODEL_DIR, length, 700 + variant).text)
        expect(ids).toHaveLength(length)
        firstBlocks.add(ids.slice(0, DEFAULT_PREFIX_BLOCK_TOKENS).join(','))
      }
      expect(firstBlocks.size).toBe(40)
    }
  })

  it('gives a variant at one length a first block of its own, not the start of the same variant at another', () => {
    const tok = new ModelTokenizer(readModelDir(DEFAULT_MODEL_DIR))
    const first = (length: number, variant: number) => tok.encodeText(textPromptOfLength(DEFAULT_MODEL_DIR, length, variant).text).slice(0, DEFAULT_PREFIX_BLOCK_TOKENS).join(',')
    // A seed of the variant alone made 3 of these 20 a prefix of the longer one.
    const shared = Array.from({ length: 20 }, (_, i) => 300 + i).filter((v) => first(48, v) === first(160, v))
    expect(shared).toEqual([])
  })

  it('gives the same prompt for the same variant', () => {
    expect(textPromptOfLength(DEFAULT_MODEL_DIR, 48, 3)).toEqual(textPromptOfLength(DEFAULT_MODEL_DIR, 48, 3))
  })
})
