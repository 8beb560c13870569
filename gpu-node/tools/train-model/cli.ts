/**
 * `npm run model:train` — rebuilds the default model (recipe.ts) from this machine's CPython
 * standard library: the corpus (stdlib_corpus.py), the tokenizer and token ids (dataset.ts),
 * training and the ONNX export (train.py, PyTorch from Debian: `apt-get install python3-torch
 * python3-onnx libopenblas0-pthread`), then the model directory's other files. Steps:
 *
 *   --stage data    corpus, tokenizer files, token ids (seconds)
 *   --stage train   the training run and the export (about an hour on 2 cores)
 *   (default: both)
 */
import { spawnSync } from 'node:child_process'
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { Tokenizer } from '@huggingface/tokenizers'
import { buildDataset, type Corpus } from './dataset.ts'
import { writeModelCard } from './model-card.ts'
import { configFiles, DATA_SEED, MODEL_DIR, QUANTIZED_GRAPH, SCHEDULE, SHAPE, WORK_DIR } from './recipe.ts'

const PYTHON = '/usr/bin/python3'
const HERE = 'gpu-node/tools/train-model'
/** glibc's allocator otherwise maps and unmaps every large activation: training ran 2.2× slower. */
const MALLOC_ENV = { MALLOC_MMAP_MAX_: '0', MALLOC_TRIM_THRESHOLD_: '68719476736' }

function run(args: string[], env: Record<string, string> = {}): void {
  const r = spawnSync(PYTHON, args, { stdio: 'inherit', env: { ...process.env, ...env } })
  if (r.status !== 0) throw new Error(`${PYTHON} ${args.join(' ')} failed (${r.status ?? r.signal})`)
}

const json = (path: string, value: unknown) => writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`)

/** The corpus, the tokenizer files and config in MODEL_DIR, the token ids in WORK_DIR. */
function prepareData(): void {
  mkdirSync(WORK_DIR, { recursive: true })
  mkdirSync(MODEL_DIR, { recursive: true })
  const corpusPath = join(WORK_DIR, 'corpus.json')
  run([join(HERE, 'stdlib_corpus.py'), corpusPath])
  const corpus = JSON.parse(readFileSync(corpusPath, 'utf8')) as Corpus
  const ds = buildDataset(corpus, { vocabSize: SHAPE.vocab_size, contextLength: SHAPE.max_position_embeddings, seed: DATA_SEED })
  writeFileSync(join(WORK_DIR, 'train.bin'), ds.train)
  writeFileSync(join(WORK_DIR, 'val.bin'), ds.val)
  json(join(MODEL_DIR, 'tokenizer.json'), ds.tokenizerJson)
  json(join(MODEL_DIR, 'tokenizer_config.json'), ds.tokenizerConfig)
  const tokenizer = new Tokenizer(ds.tokenizerJson, ds.tokenizerConfig)
  const { config, generationConfig } = configFiles((t) => tokenizer.token_to_id(t)!)
  json(join(MODEL_DIR, 'config.json'), config)
  json(join(MODEL_DIR, 'generation_config.json'), generationConfig)
  console.log(`data: ${ds.train.length} training ids, ${ds.val.length} held-out ids; tokenizer and config in ${MODEL_DIR}`)
}

function trainAndExport(): void {
  const spec = join(WORK_DIR, 'recipe.json')
  // train.py starts windows after end-of-text: config.json (the data stage's) names its id.
  const { eos_token_id: endOfText } = JSON.parse(readFileSync(join(MODEL_DIR, 'config.json'), 'utf8')) as { eos_token_id: number }
  json(spec, { model: SHAPE, train: { ...SCHEDULE, end_of_text: endOfText } })
  // The float32 export stays in WORK_DIR (eval.ts compares it); the 4-bit graph is what ships.
  run([join(HERE, 'train.py'), WORK_DIR, WORK_DIR, spec], MALLOC_ENV)
  mkdirSync(join(MODEL_DIR, 'onnx'), { recursive: true })
  run([join(HERE, 'quantize.py'), join(WORK_DIR, 'model.onnx'), join(MODEL_DIR, QUANTIZED_GRAPH)])
  copyFileSync(join(WORK_DIR, 'result.json'), join(MODEL_DIR, 'training.json'))
  writeModelCard(MODEL_DIR)
}

function main(): void {
  const { values } = parseArgs({ options: { stage: { type: 'string' } } })
  const stage = values.stage
  if (stage !== undefined && stage !== 'data' && stage !== 'train') throw new Error('--stage must be data or train')
  if (stage !== 'train') prepareData()
  if (stage !== 'data') trainAndExport()
}

main()
