/**
 * The loader held against an exporter that is not ours: test/torch/export_reference.py writes
 * HF-faithful GPT-2 and Llama decoders with PyTorch's own torch.onnx.export under Optimum's
 * names (and a GPT-2 without position_ids, as older Optimum exports), plus PyTorch's own greedy
 * tokens. The node's engine (worker-thread ONNX Runtime runner, real scheduler) must give the
 * same tokens, each request alone and all batched together. The graphs with position_ids run on
 * the slot KV path, edited at load (gpu-node/src/model/slot-kv-edit.ts), and must give the same
 * tokens on the unedited concat path too (SLOT_KV_EDIT=0); the position-less one stays on concat.
 *
 * Tie rule: where our token differs from PyTorch's at step k, PyTorch's top-2 logit margin at k
 * is checked; under TIE_LOGITS (two float32 implementations of the same maths differ by ~1e-5
 * here) the two argmaxes are a tie, and the rest of that sequence is not compared (it follows a
 * different, equally right, token). Any other difference fails. The exported models' margins
 * are ≥ 0.01, so in practice every sequence must match to its end.
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
const TIE_LOGITS = 1e-3
const VARIANTS = ['gpt2', 'gpt2-derived-positions', 'llama'] as const
/** The KV path each variant must load on (the edit needs position_ids). */
const KV_PATHS: Record<(typeof VARIANTS)[number], Pick<KvPath, 'kvCache' | 'edited'>> = {
  gpt2: { kvCache: 'slots', edited: true },
  'gpt2-derived-positions': { kvCache: 'concat', edited: false },
  llama: { kvCache: 'slots', edited: true },
}

interface Reference {
  new_tokens: number
  prompts: number[][]
  variants: Record<(typeof VARIANTS)[number], Array<{ tokens: number[]; margins: number[] }>>
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

/** The KV path the last run() loaded its graph on. */
let lastKvPath: KvPath | undefined

type Agreement = 'equal' | 'tie' | 'differs'

function agreement(ours: number[], theirs: { tokens: number[]; margins: number[] }): Agreement {
  for (let k = 0; k < theirs.tokens.length; k++) {
    if (ours[k] === theirs.tokens[k]) continue
    return theirs.margins[k]! < TIE_LOGITS ? 'tie' : 'differs'
  }
  return 'equal'
}

describe('graphs written by torch.onnx.export (HF-faithful modules, Optimum names)', () => {
  for (const variant of VARIANTS) {
    describe(variant, () => {
      it("gives PyTorch's greedy tokens, each request alone", async () => {
        const ours = await run(variant, false)
        expect(lastKvPath).toMatchObject(KV_PATHS[variant])
        expect(ours.map((t, i) => agreement(t, reference.variants[variant][i]!))).toEqual(reference.prompts.map(() => 'equal'))
      })

      it("gives PyTorch's greedy tokens with all 8 requests batched", async () => {
        const ours = await run(variant, true)
        expect(lastKvPath).toMatchObject(KV_PATHS[variant])
        expect(ours.map((t, i) => agreement(t, reference.variants[variant][i]!))).toEqual(reference.prompts.map(() => 'equal'))
      })

      it("gives PyTorch's greedy tokens batched on the unedited concat path (SLOT_KV_EDIT=0)", async () => {
        const ours = await run(variant, true, undefined, false)
        expect(lastKvPath).toMatchObject({ kvCache: 'concat', edited: false })
        expect(ours.map((t, i) => agreement(t, reference.variants[variant][i]!))).toEqual(reference.prompts.map(() => 'equal'))
      })
    })
  }

  it('would catch a loader that batched the position-less graph continuously (control)', async () => {
    const ours = await run('gpt2-derived-positions', true, 'continuous')
    expect(ours.map((t, i) => agreement(t, reference.variants['gpt2-derived-positions'][i]!))).toContain('differs')
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
