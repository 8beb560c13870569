import { cpSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { readModelDir } from './model-dir.ts'
import { loadModel } from './load-model.ts'

const dirs: string[] = []
function copyOfTiny(): string {
  const dir = join(mkdtempSync(join(tmpdir(), 'zl-modeldir-')), 'tiny')
  cpSync('models/tiny', dir, { recursive: true })
  dirs.push(dir)
  return dir
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(join(d, '..'), { recursive: true, force: true })
})

describe('readModelDir', () => {
  it('reads the generated tiny model: shapes, EOS ids, model id', () => {
    const dir = readModelDir('models/tiny')
    expect(dir.modelId).toBe('tiny')
    expect(dir.config).toMatchObject({ modelType: 'gpt2', vocabSize: 512, numLayers: 4, numHeads: 4, numKvHeads: 4, headDim: 64, contextLength: 1024 })
    expect(dir.eosTokenIds.length).toBeGreaterThan(0)
  })

  it('reads Llama-style names, including grouped KV heads', () => {
    expect(readModelDir('models/tiny-llama').config).toMatchObject({ modelType: 'llama', numHeads: 8, numKvHeads: 2 })
  })

  it('reads a sliding window only where the model uses one (Qwen2 configs set use_sliding_window false)', () => {
    expect(readModelDir('models/tiny').config.slidingWindow).toBeUndefined()
    const dir = copyOfTiny()
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, sliding_window: 4096 }))
    expect(readModelDir(dir).config.slidingWindow).toBe(4096)
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, sliding_window: 32768, use_sliding_window: false }))
    expect(readModelDir(dir).config.slidingWindow).toBeUndefined()
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, sliding_window: null }))
    expect(readModelDir(dir).config.slidingWindow).toBeUndefined()
  })

  it("reads generation_config.json's sampling and max-token defaults, as vLLM takes them", () => {
    expect(readModelDir('models/tiny').generationDefaults).toEqual({ sampling: {} })
    const dir = copyOfTiny()
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [1, 2], do_sample: true, temperature: 0.6, top_p: 0.9, top_k: -1, min_p: 0.05, repetition_penalty: 1.1, max_new_tokens: 64 }))
    const read = readModelDir(dir)
    expect(read.generationDefaults).toEqual({ sampling: { temperature: 0.6, topP: 0.9, topK: 0, minP: 0.05, repetitionPenalty: 1.1 }, maxNewTokens: 64 })
    expect(read.eosTokenIds).toEqual([1, 2])
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ top_p: 2 }))
    expect(() => readModelDir(dir)).toThrow(/generation_config\.json: top_p/)
  })

  it('names the missing directory and how to make the tiny one', () => {
    expect(() => readModelDir('/nonexistent/models/x')).toThrow(/\/nonexistent\/models\/x: directory does not exist.*model:tiny/)
  })

  it.each([
    ['model.onnx', (d: string) => rmSync(join(d, 'model.onnx')), /model\.onnx: missing/],
    ['tokenizer.json', (d: string) => rmSync(join(d, 'tokenizer.json')), /tokenizer\.json: missing/],
    ['config.json (bad JSON)', (d: string) => writeFileSync(join(d, 'config.json'), '{ nope'), /config\.json: is not valid JSON/],
    ['config.json (no vocab)', (d: string) => writeFileSync(join(d, 'config.json'), JSON.stringify({ model_type: 'gpt2', n_layer: 2 })), /config\.json: vocab_size/],
    ['config.json (no layers)', (d: string) => writeFileSync(join(d, 'config.json'), JSON.stringify({ model_type: 'gpt2', vocab_size: 10 })), /config\.json: missing .*num_hidden_layers/],
  ])('fails with one message naming %s', (_name, breakIt, message) => {
    const dir = copyOfTiny()
    breakIt(dir)
    expect(() => readModelDir(dir)).toThrow(message)
  })

  it.each([
    ["Optimum's merged decoder", 'decoder_model_merged.onnx'],
    ["Optimum's decoder with past", 'decoder_with_past_model.onnx'],
    ["onnx-community's onnx/ folder", 'onnx/model.onnx'],
  ])('finds the graph under %s (%s)', (_layout, file) => {
    const dir = copyOfTiny()
    mkdirSync(join(dir, 'onnx'))
    renameSync(join(dir, 'model.onnx'), join(dir, file))
    expect(readModelDir(dir)).toMatchObject({ onnxFile: file, onnxPath: join(dir, file) })
  })

  it('serves the variant MODEL_FILE names, and names it when it is missing', async () => {
    const dir = copyOfTiny()
    mkdirSync(join(dir, 'onnx'))
    renameSync(join(dir, 'model.onnx'), join(dir, 'onnx/model_quantized.onnx'))
    expect(() => readModelDir(dir)).toThrow(/model\.onnx: missing .*MODEL_FILE/)
    expect(() => readModelDir(dir, 'onnx/model_q4.onnx')).toThrow(/onnx\/model_q4\.onnx: missing/)
    const loaded = await loadModel({ intraOpThreads: 1, modelDir: dir, modelFile: 'onnx/model_quantized.onnx', executionProvider: 'cpu', kvBudgetBytes: 1024 * 1024 })
    expect(loaded.served.graph).toBe('onnx/model_quantized.onnx')
    expect(loaded.runner.info).toMatchObject({ numLayers: 4, batching: 'continuous' })
    await loaded.runner.close()
  })

  it('refuses an ONNX file that is not a decoder with past, naming the file', async () => {
    const dir = copyOfTiny()
    writeFileSync(join(dir, 'model.onnx'), 'not a model')
    await expect(loadModel({ intraOpThreads: 1, modelDir: dir, executionProvider: 'cpu', kvBudgetBytes: 1024 * 1024 })).rejects.toThrow(/model\.onnx/)
  })
})
