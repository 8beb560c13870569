import { createHash } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { generateModel } from './generate-model.ts'
import type { PresetName } from './presets.ts'

const FILES = ['model.onnx', 'config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json']
const root = mkdtempSync(join(tmpdir(), 'zerolayer-generate-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

let runs = 0
async function generate(preset: PresetName, seed: number): Promise<string> {
  const outDir = join(root, `${preset}-${seed}-${runs++}`)
  await generateModel({ preset, outDir, seed })
  return outDir
}

const sha256 = (path: string): string => createHash('sha256').update(readFileSync(path)).digest('hex')
const readJson = (path: string): Record<string, unknown> => JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>

describe.each(['tiny', 'tiny-llama', 'tiny-qwen2'] as const)('generateModel(%s)', (preset) => {
  it('is deterministic: same seed, byte-identical files; another seed, another model.onnx', async () => {
    const [a, b, c] = [await generate(preset, 7), await generate(preset, 7), await generate(preset, 8)]
    for (const f of FILES) expect(sha256(join(b, f)), f).toBe(sha256(join(a, f)))
    expect(sha256(join(c, 'model.onnx'))).not.toBe(sha256(join(a, 'model.onnx')))
    expect(readJson(join(c, 'config.json')).zerolayer).toEqual({ preset, seed: 8, lm_head_bias: true, kv_cache: 'slots' })
  })

  it('writes HF-style config.json and generation_config.json', async () => {
    const dir = await generate(preset, 42)
    const config = readJson(join(dir, 'config.json'))
    const generation = readJson(join(dir, 'generation_config.json'))
    expect(config.vocab_size).toBe(512)
    expect(generation).toMatchObject({ bos_token_id: 509, eos_token_id: [509, 511] })
    if (preset === 'tiny') {
      expect(config).toMatchObject({ model_type: 'gpt2', n_embd: 256, n_layer: 4, n_head: 4, n_positions: 1024, bos_token_id: 509, eos_token_id: 509 })
    } else if (preset === 'tiny-qwen2') {
      // Every key, in the order transformers' Qwen2Config writes them (sorted).
      expect(Object.keys(config)).toEqual(Object.keys(config).sort())
      expect(config).toEqual({
        architectures: ['Qwen2ForCausalLM'], attention_dropout: 0, bos_token_id: 509, eos_token_id: 509, hidden_act: 'silu', hidden_size: 256,
        initializer_range: 0.02, intermediate_size: 704, max_position_embeddings: 2048, max_window_layers: 4, model_type: 'qwen2',
        num_attention_heads: 8, num_hidden_layers: 4, num_key_value_heads: 2, rms_norm_eps: 1e-6, rope_scaling: null, rope_theta: 10000,
        sliding_window: null, tie_word_embeddings: false, torch_dtype: 'float32', use_cache: true, use_sliding_window: false, vocab_size: 512,
        zerolayer: { preset, seed: 42, lm_head_bias: true, kv_cache: 'slots' },
      })
    } else {
      expect(config).toMatchObject({
        model_type: 'llama', hidden_size: 256, num_hidden_layers: 4, num_attention_heads: 8, num_key_value_heads: 2, head_dim: 32,
        max_position_embeddings: 2048, rope_theta: 10000, bos_token_id: 509, eos_token_id: 509,
      })
      expect(config.intermediate_size).toBeTypeOf('number')
      expect(config.rms_norm_eps).toBeTypeOf('number')
    }
    const tokenizer = readJson(join(dir, 'tokenizer.json')) as { model: { vocab: object }; added_tokens: unknown[] }
    expect(Object.keys(tokenizer.model.vocab).length + tokenizer.added_tokens.length).toBe(config.vocab_size)
  })
})
