/**
 * The loader held against an exporter that is not ours: test/torch/export_reference.py writes
 * HF-faithful GPT-2 and Llama decoders with PyTorch's own torch.onnx.export under Optimum's
 * names (and a GPT-2 without position_ids, as older Optimum exports), plus PyTorch's own greedy
 * tokens. The node's engine (worker-thread ONNX Runtime runner, real scheduler) must give the
 * same tokens, each request alone and all batched together. The graphs with position_ids run on
 * the slot KV path, edited at load (gpu-node/src/model/slot-kv-edit.ts), and must give the same
 * tokens on the unedited concat path too (SLOT_KV_EDIT=0); the position-less one stays on concat.
 *
 * Also float16 exports (the fp32 export converted as onnx-community's model_fp16.onnx are:
 * float16 weights, KV and logits) and 4-bit ones (MatMulNBits, as model_q4.onnx, with float32 KV,
 * and converted to float16 as model_q4f16.onnx). Their PyTorch side computes in float32 with the
 * weights the graph holds (rounded to float16; dequantized from 4 bits).
 *
 * Tie rule: where our token differs from PyTorch's at step k, PyTorch's top-2 logit margin at k
 * is checked; under the variant's float noise the two argmaxes are a tie, and the rest of that
 * sequence is not compared (it follows a different, equally right, token). Any other difference
 * fails. float32 graphs: 1e-3 (two float32 implementations of the same maths differ by ~1e-5
 * here; the models' margins are ≥ 0.0025). float16 graphs round every intermediate to 11
 * significant bits: 4 float16 ulps at the top logit's magnitude (0.03 for logits near 8; the one
 * tie seen, llama-q4f16's prompt 4, had a margin of 0.0047 at a top logit of 7.3, about 1 ulp).
 *
 * Needs Debian's python3-torch and python3-onnx (`.ci/run` installs them).
 */
import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { GREEDY } from '../../shared/src/generation.ts'
import { Engine } from '../../gpu-node/src/engine/engine.ts'
import type { EngineRequest } from '../../gpu-node/src/engine/types.ts'
import { loadModel } from '../../gpu-node/src/model/load-model.ts'
import type { KvPath } from '../../gpu-node/src/model/kv-path.ts'
import type { Batching, ModelInfo, ModelRunner, StepPlan, StepResult } from '../../gpu-node/src/model/runner.ts'
import { generateText } from '../../gpu-node/test/support/generate-text.ts'

const PYTHON = '/usr/bin/python3'
const TIE_FLOAT32 = 1e-3
const FLOAT16_ULPS = 4
/** Each variant and the KV/logits type its graph declares. */
const VARIANTS = {
  gpt2: 'float32',
  'gpt2-derived-positions': 'float32',
  llama: 'float32',
  'gpt2-fp16': 'float16',
  'llama-fp16': 'float16',
  'llama-q4': 'float32',
  'llama-q4f16': 'float16',
} as const
type Variant = keyof typeof VARIANTS

/** The KV path a variant must load on: the slot KV edit needs position_ids. */
const kvPathOf = (variant: Variant): Pick<KvPath, 'kvCache' | 'edited'> =>
  variant === 'gpt2-derived-positions' ? { kvCache: 'concat', edited: false } : { kvCache: 'slots', edited: true }

interface Greedy {
  tokens: number[]
  margins: number[]
  /** PyTorch's top logit at each step (the float16 tie rule's scale). */
  tops: number[]
}

interface Reference {
  new_tokens: number
  prompts: number[][]
  variants: Record<Variant, Greedy[]>
}

const root = mkdtempSync(join(tmpdir(), 'zerolayer-torch-'))
let reference: Reference

beforeAll(() => {
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} missing: apt-get install -y python3-torch python3-onnx`)
  try {
    execFileSync(PYTHON, ['test/torch/export_reference.py', root, 'models/tiny'], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000 })
  } catch (e) {
    const stderr = (e as { stderr?: Buffer }).stderr?.toString() ?? ''
    throw new Error(`export_reference.py failed (apt-get install -y python3-torch python3-onnx):\n${stderr.slice(-2000)}`)
  }
  reference = JSON.parse(readFileSync(join(root, 'reference.json'), 'utf8')) as Reference
}, 180_000)

afterAll(() => rmSync(root, { recursive: true, force: true }))

/** The worker-thread runner, recording every token it samples by sequence, and each sequence's prompt. */
class RecordingRunner implements ModelRunner {
  readonly info: ModelInfo
  readonly tokens = new Map<number, number[]>()
  readonly prompts = new Map<number, number[]>()

  constructor(
    private readonly inner: ModelRunner,
    batching?: Batching,
  ) {
    this.info = { ...inner.info, ...(batching ? { batching } : {}) }
  }

  async step(plan: StepPlan): Promise<StepResult> {
    for (const p of plan.prefill) if (p.start) this.prompts.set(p.seqId, p.start.tokens.slice(0, p.start.promptLen))
    const result = await this.inner.step(plan)
    for (const part of [result.joined, result.decoded]) {
      part.seqIds.forEach((id, i) => this.tokens.set(id, [...(this.tokens.get(id) ?? []), part.tokens[i]!]))
    }
    return result
  }

  close(): Promise<void> {
    return this.inner.close()
  }

  /** The tokens generated for `prompt` (the first sequence that had it). */
  tokensFor(prompt: number[]): number[] {
    for (const [id, p] of this.prompts) if (p.join() === prompt.join()) return this.tokens.get(id) ?? []
    return []
  }
}

/** The KV path the last run() loaded its graph on. */
let lastKvPath: KvPath | undefined

async function run(variant: string, together: boolean, batching?: Batching, slotKvEdit = true): Promise<number[][]> {
  const { runner, tokenizer } = await loadModel({ intraOpThreads: 1, modelDir: join(root, variant), executionProvider: 'cpu', kvBudgetBytes: 256 * 1024 * 1024, slotKvEdit })
  lastKvPath = runner.info.kvPath
  const recording = new RecordingRunner(runner, batching)
  const engine = new Engine({ runner: recording, decoder: tokenizer, limits: { maxBatch: 16, maxQueue: 64, kvBudgetBytes: 256 * 1024 * 1024, prefillChunkTokens: 32 } })
  const req = (promptTokens: number[], i: number): EngineRequest => ({ id: `${variant}-${i}`, promptTokens, maxTokens: reference.new_tokens, stop: [], sampling: GREEDY, priority: 0, ignoreEos: true })
  if (together) await Promise.all(reference.prompts.map((p, i) => generateText(engine, req(p, i))))
  else for (const [i, p] of reference.prompts.entries()) await generateText(engine, req(p, i))
  await engine.close()
  return reference.prompts.map((p) => recording.tokensFor(p))
}

type Agreement = 'equal' | 'tie' | 'differs'

/** Float noise of a variant's logits near `top`: see the tie rule above. */
function tieBound(variant: Variant, top: number): number {
  if (VARIANTS[variant] === 'float32') return TIE_FLOAT32
  return FLOAT16_ULPS * 2 ** (Math.floor(Math.log2(Math.max(Math.abs(top), 2 ** -14))) - 10)
}

function agreement(variant: Variant, ours: number[], theirs: Greedy): Agreement {
  for (let k = 0; k < theirs.tokens.length; k++) {
    if (ours[k] === theirs.tokens[k]) continue
    return theirs.margins[k]! < tieBound(variant, theirs.tops[k]!) ? 'tie' : 'differs'
  }
  return 'equal'
}

function agreements(variant: Variant, ours: number[][]): Agreement[] {
  return ours.map((t, i) => agreement(variant, t, reference.variants[variant][i]!))
}

/** Every sequence equal to PyTorch's, or equal up to a tie ('tie' is as right as 'equal'). */
function expectAgrees(variant: Variant, ours: number[][]): void {
  expect(agreements(variant, ours).map((a) => (a === 'tie' ? 'equal' : a))).toEqual(reference.prompts.map(() => 'equal'))
}

describe('graphs written by torch.onnx.export (HF-faithful modules, Optimum names)', () => {
  for (const variant of Object.keys(VARIANTS) as Variant[]) {
    describe(variant, () => {
      it("gives PyTorch's greedy tokens, each request alone", async () => {
        const ours = await run(variant, false)
        expect(lastKvPath).toMatchObject(kvPathOf(variant))
        expectAgrees(variant, ours)
      })

      it("gives PyTorch's greedy tokens with all 8 requests batched", async () => {
        const ours = await run(variant, true)
        expect(lastKvPath).toMatchObject(kvPathOf(variant))
        expectAgrees(variant, ours)
      })

      it("gives PyTorch's greedy tokens batched on the unedited concat path (SLOT_KV_EDIT=0)", async () => {
        const ours = await run(variant, true, undefined, false)
        expect(lastKvPath).toMatchObject({ kvCache: 'concat', edited: false })
        expectAgrees(variant, ours)
      })
    })
  }

  it('would catch a loader that batched the position-less graph continuously (control)', async () => {
    expect(agreements('gpt2-derived-positions', await run('gpt2-derived-positions', true, 'continuous'))).toContain('differs')
  })
})

/**
 * The float16 graphs hold float16 KV: half the bytes per token of the same model in float32,
 * so the same KV budget holds twice the tokens.
 */
describe('the KV type the graph declares', () => {
  it('is float16 for the float16 exports, at half the bytes per token, and float32 otherwise', async () => {
    const infos = await Promise.all((Object.keys(VARIANTS) as Variant[]).map(async (variant) => {
      const { runner } = await loadModel({ intraOpThreads: 1, modelDir: join(root, variant), executionProvider: 'cpu', kvBudgetBytes: 1 << 20 })
      await runner.close()
      return [variant, { kvType: runner.info.kvType, kvBytesPerToken: runner.info.kvBytesPerToken }] as const
    }))
    const f32 = 2 * 2 * 4 * 32 * 4 // K and V × 2 layers × 4 KV heads × head dim 32 × 4 bytes
    expect(Object.fromEntries(infos)).toMatchObject({
      gpt2: { kvType: 'float32', kvBytesPerToken: f32 },
      'gpt2-fp16': { kvType: 'float16', kvBytesPerToken: f32 / 2 },
      llama: { kvType: 'float32', kvBytesPerToken: f32 / 2 }, // 2 KV heads (GQA)
      'llama-fp16': { kvType: 'float16', kvBytesPerToken: f32 / 4 },
      'llama-q4': { kvType: 'float32' },
      'llama-q4f16': { kvType: 'float16', kvBytesPerToken: f32 / 4 },
    })
  })
})

/**
 * gpt2 rewritten the way ONNX Runtime's quantize_dynamic writes onnx-community's
 * model_quantized.onnx (int8 weights, DynamicQuantizeLinear activations). One activation scale
 * covers the whole batch, so a row's tokens depend on its batch: the node must see it at load
 * and run one sequence at a time.
 */
describe('a dynamically quantized (int8) graph', () => {
  it('is detected at load, generates, and gives each request its tokens alone when all are sent together', async () => {
    const { runner } = await loadModel({ intraOpThreads: 1, modelDir: join(root, 'gpt2-int8-dynamic'), executionProvider: 'cpu', kvBudgetBytes: 1 << 20 })
    expect(runner.info).toMatchObject({ batching: 'alone', batchingWhy: expect.stringContaining('DynamicQuantizeLinear') })
    await runner.close()
    const alone = await run('gpt2-int8-dynamic', false)
    expect(alone.every((t) => t.length === reference.new_tokens)).toBe(true)
    expect(await run('gpt2-int8-dynamic', true)).toEqual(alone)
  })

  it('would give other tokens if batched continuously (control)', async () => {
    const alone = await run('gpt2-int8-dynamic', false)
    expect(await run('gpt2-int8-dynamic', true, 'continuous')).not.toEqual(alone)
  })
})
