import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
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

  it('refuses an ONNX file that is not a decoder with past, naming the file', async () => {
    const dir = copyOfTiny()
    writeFileSync(join(dir, 'model.onnx'), 'not a model')
    await expect(loadModel({ modelDir: dir, executionProvider: 'cpu', kvBudgetBytes: 1024 * 1024 })).rejects.toThrow(/model\.onnx/)
  })
})
