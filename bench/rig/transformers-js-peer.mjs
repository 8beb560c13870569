// The peer side of scenarios/engine-peer.ts: transformers.js generate() on one model folder,
// driven over IPC. Copied into the peer's install folder before it is started, so its import
// resolves to the pinned install (lib/peer-transformers-js.ts), never to the product's modules.
//   argv: MODEL_DIR THREADS
//   in:   { texts: string[], maxTokens }   (one row, or several as one padded batch)
//   out:  { promptTokens: number[], ids: number[][], firstMs, totalMs }
import { AutoModelForCausalLM, AutoTokenizer, env } from '@huggingface/transformers'
import { basename, dirname } from 'node:path'

const [dir, threads] = process.argv.slice(2)
env.allowRemoteModels = false
env.localModelPath = `${dirname(dir)}/`
const name = basename(dir)
const tokenizer = await AutoTokenizer.from_pretrained(name)
// A decoder-only batch pads on the left, as transformers does for generation.
tokenizer.padding_side = 'left'
if (tokenizer.pad_token === null || tokenizer.pad_token === undefined) tokenizer.pad_token = tokenizer.eos_token
const model = await AutoModelForCausalLM.from_pretrained(name, { dtype: 'fp32', session_options: { intraOpNumThreads: Number(threads), interOpNumThreads: 1 } })
process.send({ ready: true })

process.on('message', async ({ texts, maxTokens }) => {
  const enc = tokenizer(texts, { padding: true })
  const width = enc.input_ids.dims[1]
  const started = performance.now()
  let firstMs
  let puts = 0
  // put() gets the prompt first, then each step's new tokens.
  const streamer = { put: () => void (++puts === 2 && (firstMs = performance.now() - started)), end: () => {} }
  const out = await model.generate({ ...enc, max_new_tokens: maxTokens, min_new_tokens: maxTokens, do_sample: false, streamer })
  const totalMs = performance.now() - started
  const flat = Array.from(out.data, Number)
  const rowWidth = out.dims[1]
  const ids = texts.map((_, r) => flat.slice(r * rowWidth + width, (r + 1) * rowWidth))
  const mask = Array.from(enc.attention_mask.data, Number)
  const promptTokens = texts.map((_, r) => mask.slice(r * width, (r + 1) * width).reduce((a, b) => a + b, 0))
  process.send({ promptTokens, ids, firstMs: firstMs ?? totalMs, totalMs })
})
