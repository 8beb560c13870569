/**
 * `npm run model:eval [-- --model DIR]` — how good the default model is (or any model directory),
 * measured the way users meet it: through a GPU node (`npm run gpu-node`, ALLOW_UNSIGNED, on a
 * free port) for everything generated, and the graph itself for the held-out loss.
 *
 * - held-out loss: mean next-token loss (nats) and perplexity over the held-out files' ids
 *   (dataset.ts `val.bin`, rebuilt with the model's own tokenizer), in full-context windows,
 *   through ONNX Runtime on the model's graph — so a quantized graph is judged as served;
 * - code that parses: held-out functions (eval_cases.py) completed greedily from their signature
 *   and docstring, at most 128 tokens, cut at the end of the body, parsed with Python's `ast`;
 * - infill: the same functions' middle body line removed, completed greedily with `suffix`;
 *   the share whose first line is exactly the removed line (a model without FIM tokens: none);
 * - speed: TTFT of a 512-token prompt (median of 5), and tokens/s of 128-token answers at
 *   batch 1 and at 32 at once: through the GPU node, then through `npm start` (edge and all).
 * Writes MODEL_DIR/eval.json.
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import * as ort from 'onnxruntime-node'
import { Tokenizer } from '@huggingface/tokenizers'
import { createServer } from 'node:net'
import { EOS_TOKEN } from '../generate-model/tokenizer-files.ts'
import { writeModelCard } from './model-card.ts'
import { MODEL_DIR, QUANTIZED_GRAPH, WORK_DIR } from './recipe.ts'

const PYTHON = '/usr/bin/python3'
const HERE = 'gpu-node/tools/train-model'
const MAX_NEW = 128

interface Cases {
  completion: Array<{ prompt: string; body: string }>
  infill: Array<{ prefix: string; suffix: string; line: string }>
}

function python(args: string[]): string {
  const r = spawnSync(PYTHON, args, { encoding: 'utf8', cwd: HERE })
  if (r.status !== 0) throw new Error(`${PYTHON} ${args.join(' ')}: ${r.stderr}`)
  return r.stdout
}

/** A port the OS says is free now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
    server.on('error', reject)
  })
}

async function startNode(modelDir: string): Promise<{ url: string; stop: () => void }> {
  const port = await freePort()
  const child = spawn(process.execPath, ['infra/scripts/launch-gpu-node.mjs'], { env: { ...process.env, MODEL_DIR: modelDir, PORT: String(port), ALLOW_UNSIGNED: '1', MAX_BATCH: '32' }, stdio: 'ignore' })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 600; i++) {
    const ready = await fetch(`${url}/readyz`).then((r) => r.ok, () => false)
    if (ready) return { url, stop: () => child.kill('SIGTERM') }
    if (child.exitCode !== null) break
    await new Promise((r) => setTimeout(r, 100))
  }
  child.kill('SIGKILL')
  throw new Error(`the node on ${modelDir} did not become ready`)
}

async function complete(url: string, model: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ model, temperature: 0, ...body }) })
  const json = (await res.json()) as { choices?: Array<{ text: string }> }
  return { status: res.status, text: json.choices?.[0]?.text ?? '' }
}

/** Runs `work` over `items`, `width` at a time, in order. */
async function pool<T, R>(items: readonly T[], width: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: width }, async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await work(items[i]!)
  }))
  return out
}

/** Mean next-token loss over `ids` in windows of `length`, through a graph (no cache). */
async function heldOutLoss(graphPath: string, config: Record<string, number>, ids: Uint16Array, length: number): Promise<number> {
  const session = await ort.InferenceSession.create(graphPath, { intraOpNumThreads: 2 })
  const kv = config.num_key_value_heads ?? config.num_attention_heads!
  const hd = config.hidden_size! / config.num_attention_heads!
  let total = 0
  let n = 0
  for (let s = 0; s + 1 < ids.length; s += length) {
    const w = Array.from(ids.subarray(s, Math.min(s + length + 1, ids.length)))
    const t = w.length - 1
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(w.slice(0, t), BigInt), [1, t]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(t).fill(1n), [1, t]),
      position_ids: new ort.Tensor('int64', BigInt64Array.from({ length: t }, (_, i) => BigInt(i)), [1, t]),
    }
    for (let l = 0; l < config.num_hidden_layers!; l++) for (const k of ['key', 'value']) feeds[`past_key_values.${l}.${k}`] = new ort.Tensor('float32', new Float32Array(0), [1, kv, 0, hd])
    const logits = (await session.run(feeds, ['logits'])).logits!.data as Float32Array
    const v = config.vocab_size!
    for (let i = 0; i < t; i++) {
      const row = logits.subarray(i * v, (i + 1) * v)
      let max = -Infinity
      for (const x of row) if (x > max) max = x
      let sum = 0
      for (const x of row) sum += Math.exp(x - max)
      total += Math.log(sum) + max - row[w[i + 1]!]!
      n++
    }
  }
  await session.release()
  return total / n
}

/**
 * TTFT of a 512-token prompt (median of 5, each a different one: a repeated prompt would be
 * served from the prefix cache) and tokens/s of 128-token answers alone and 32 at once, at `url`;
 * keys prefixed with `prefix`.
 */
async function speed(url: string, model: string, longs: readonly string[], headers: Record<string, string>, prefix: string): Promise<Record<string, number>> {
  const ttfts: number[] = []
  for (const long of longs) {
    const started = performance.now()
    const { status } = await complete(url, model, { prompt: long, max_tokens: 1 }, headers)
    if (status !== 200) throw new Error(`${url}: ${status} for the 512-token prompt`)
    ttfts.push(performance.now() - started)
  }
  const rate = async (concurrent: number) => {
    const started = performance.now()
    await pool(Array.from({ length: concurrent }, (_, i) => i), concurrent, (i) => complete(url, model, { prompt: `def f${i}(x):\n`, max_tokens: MAX_NEW, ignore_eos: true }, headers))
    return (concurrent * MAX_NEW) / ((performance.now() - started) / 1000)
  }
  const out = { [`${prefix}ttft_512_ms`]: round(ttfts.sort((a, b) => a - b)[ttfts.length >> 1]!, 1), [`${prefix}tokens_per_s_b1`]: round(await rate(1), 1), [`${prefix}tokens_per_s_b32`]: round(await rate(32), 1) }
  console.log(`speed${prefix === '' ? '' : ` (${prefix.replace(/_$/, '')})`}: ${JSON.stringify(out)}`)
  return out
}

/**
 * `npm start -- --regions 1 --model DIR`: the stack a user meets (its default edge, one region so
 * the idle nodes of others do not share the two cores), on its usual ports; its edge URL and dev
 * key read off its banner.
 */
async function startStack(modelDir: string): Promise<{ url: string; headers: Record<string, string>; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'infra/local/stack-cli.ts', '--regions', '1', '--model', modelDir], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  let out = ''
  const banner = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      if (/Ctrl-C stops everything/.test(out)) resolve(out)
    })
    child.once('exit', (code) => reject(new Error(`npm start exited (${code}) before it was up`)))
  })
  const url = /edge\s+(http:\/\/\S+)/.exec(banner)?.[1]
  const key = /dev API key\s+(\S+)/.exec(banner)?.[1]
  if (!url || !key) throw new Error('npm start: no edge URL or dev key in its banner')
  return {
    url,
    headers: { authorization: `Bearer ${key}` },
    stop: async () => {
      child.kill('SIGTERM')
      await exited
    },
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { model: { type: 'string' }, graph: { type: 'string' } } })
  const modelDir = values.model ?? MODEL_DIR
  const graph = values.graph ?? (modelDir === MODEL_DIR ? QUANTIZED_GRAPH : 'model.onnx')
  const model = modelDir.replace(/\/+$/, '').split('/').pop()!
  const tmp = mkdtempSync(join(tmpdir(), 'zl-eval-'))
  python(['eval_cases.py', 'cases', join(tmp, 'cases.json')])
  const cases = JSON.parse(readFileSync(join(tmp, 'cases.json'), 'utf8')) as Cases
  const result: Record<string, unknown> = { model, graph }

  // The held-out ids in this model's own tokenizer (the trained model's are val.bin already).
  const tokenizer = new Tokenizer(JSON.parse(readFileSync(join(modelDir, 'tokenizer.json'), 'utf8')), JSON.parse(readFileSync(join(modelDir, 'tokenizer_config.json'), 'utf8')))
  const corpus = JSON.parse(readFileSync(join(WORK_DIR, 'corpus.json'), 'utf8')) as { val: string[] }
  const eos = tokenizer.token_to_id(EOS_TOKEN)!
  const val = Uint16Array.from(corpus.val.flatMap((c) => [...tokenizer.encode(c, { add_special_tokens: false }).ids, eos]))
  const config = JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as Record<string, number> & { model_type?: string }
  // The loss is read off an Optimum-interface Llama export (the trained model's); the generated
  // presets' graphs keep their KV in slots, which this plain run does not feed.
  if (config.model_type === 'llama') {
    const length = config.max_position_embeddings ?? 1024
    const loss = await heldOutLoss(join(modelDir, graph), config, val, length)
    result.held_out_loss = round(loss, 4)
    result.held_out_perplexity = round(Math.exp(loss), 3)
    console.log(`held-out loss ${result.held_out_loss} (perplexity ${result.held_out_perplexity}) over ${val.length} tokens`)
    // The float32 export the shipped graph was quantized from, when this machine trained it.
    const float32 = join(WORK_DIR, 'model.onnx')
    if (modelDir === MODEL_DIR && existsSync(float32)) {
      const full = await heldOutLoss(float32, config, val, length)
      result.held_out_loss_float32 = round(full, 4)
      result.quantized_over_float32_loss = round(loss / full, 4)
      console.log(`float32 graph: held-out loss ${result.held_out_loss_float32}; 4-bit ÷ float32 ${result.quantized_over_float32_loss}`)
    }
  }

  const longs = [0, 1, 2, 3, 4].map((i) => tokenizer.decode(Array.from(val.subarray(512 * i, 512 * (i + 1))), { skip_special_tokens: true }))
  const node = await startNode(modelDir)
  try {
    const completions = await pool(cases.completion, 8, (c) => complete(node.url, model, { prompt: c.prompt, max_tokens: MAX_NEW }))
    writeFileSync(join(tmp, 'parse.json'), JSON.stringify(cases.completion.map((c, i) => ({ prompt: c.prompt, completion: completions[i]!.text }))))
    const parsed = JSON.parse(python(['eval_cases.py', 'parse', join(tmp, 'parse.json')])) as { parsed: number; total: number }
    result.parse_rate = round(parsed.parsed / parsed.total, 3)
    result.parsed = parsed.parsed
    result.parse_cases = parsed.total
    console.log(`code that parses: ${parsed.parsed} of ${parsed.total}`)
    // A quarter of the held-out functions are longer than the cap: written out as in the file,
    // they cannot end within it. The same count among those whose own body fits says how much of
    // the gap is the cap's.
    const fitting = cases.completion.flatMap((c, i) => (tokenizer.encode(c.body, { add_special_tokens: false }).ids.length <= MAX_NEW ? [{ prompt: c.prompt, completion: completions[i]!.text }] : []))
    writeFileSync(join(tmp, 'parse-fitting.json'), JSON.stringify(fitting))
    const parsedFitting = JSON.parse(python(['eval_cases.py', 'parse', join(tmp, 'parse-fitting.json')])) as { parsed: number; total: number }
    result.parsed_fitting = parsedFitting.parsed
    result.fitting_cases = parsedFitting.total
    console.log(`of those whose own body fits in ${MAX_NEW} tokens: ${parsedFitting.parsed} of ${parsedFitting.total}`)

    const infills = await pool(cases.infill, 8, (c) => complete(node.url, model, { prompt: c.prefix, suffix: c.suffix, max_tokens: 64 }))
    if (infills.every((r) => r.status === 400)) result.infill_exact_line = null
    else {
      const exact = infills.filter((r, i) => r.status === 200 && r.text.split('\n')[0] === cases.infill[i]!.line.replace(/\n$/, '')).length
      result.infill_exact_line = round(exact / infills.length, 3)
      result.infill_exact = exact
      console.log(`infill: ${exact} of ${infills.length} lines exact`)
    }
    result.infill_cases = infills.length

    Object.assign(result, await speed(node.url, model, longs, {}, ''))
  } finally {
    node.stop()
  }
  const stack = await startStack(modelDir)
  try {
    Object.assign(result, await speed(stack.url, model, longs, stack.headers, 'stack_'))
  } finally {
    await stack.stop()
  }
  writeFileSync(join(modelDir, 'eval.json'), `${JSON.stringify(result, null, 2)}\n`)
  if (modelDir === MODEL_DIR) writeModelCard(modelDir)
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits

await main()
