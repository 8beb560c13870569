/**
 * Engine scenario 5: what a real export's layout costs after the slot KV edit. The `small` preset
 * is generated twice from one seed (the same weights): in the slot layout, and in Optimum's
 * concat layout (present = past ⧺ new), which the node edits at load onto the slot KV path
 * (gpu-node/src/model/slot-kv-edit.ts). Each graph runs in the product's worker-thread runner:
 * 32 prompts of 32 tokens prefilled, then decode steps back to back at batch 32 (the steady
 * state: every row decodes, nothing prefills), in rounds with the order rotated. The figure is
 * the median over rounds of edited-concat ÷ slot tokens/s; the unedited concat path
 * (SLOT_KV_EDIT=0) is measured in the same rounds for perspective.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateModel } from '../../gpu-node/tools/generate-model/generate-model.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { OnnxRunner } from '../../gpu-node/src/model/onnx-runner.ts'
import type { BenchContext } from '../lib/report-types.ts'
import { median, round } from '../lib/stats.ts'
import { runnerDecode } from './engine-overhead.ts'
import { NEW_TOKENS, PROMPT_TOKENS, rotate, STREAMS } from './engine-rig.ts'

const SEED = 42
const KV_BUDGET_BYTES = 512 * 1024 * 1024

type Layout = 'slots' | 'concat_edited' | 'concat_unedited'
const LAYOUTS: Layout[] = ['slots', 'concat_edited', 'concat_unedited']

export async function runOptimumLayout(ctx: BenchContext, ep: 'cpu' | 'cuda', raw: Record<string, unknown>, notes: string[]): Promise<number> {
  const root = mkdtempSync(join(tmpdir(), 'zerolayer-bench-layout-'))
  const runners = new Map<Layout, OnnxRunner>()
  try {
    ctx.log(`optimum layout: generating small twice (seed ${SEED}): slot KV and concat KV`)
    for (const kvCache of ['slots', 'concat'] as const) await generateModel({ preset: 'small', outDir: join(root, kvCache), seed: SEED, kvCache })
    const slotsDir = readModelDir(join(root, 'slots'))
    const concatDir = readModelDir(join(root, 'concat'))
    runners.set('slots', await OnnxRunner.start(slotsDir, { executionProvider: ep, kvBudgetBytes: KV_BUDGET_BYTES }))
    runners.set('concat_edited', await OnnxRunner.start(concatDir, { executionProvider: ep, kvBudgetBytes: KV_BUDGET_BYTES }))
    runners.set('concat_unedited', await OnnxRunner.start(concatDir, { executionProvider: ep, kvBudgetBytes: KV_BUDGET_BYTES, slotKvEdit: false }))
    const paths = Object.fromEntries([...runners].map(([l, r]) => [l, r.info.kvPath]))
    const edited = runners.get('concat_edited')!.info.kvPath
    if (!edited?.edited) throw new Error(`the concat-layout small was not edited onto the slot KV path: ${edited?.why ?? 'no KV path reported'}`)
    if (runners.get('concat_unedited')!.info.kvPath?.kvCache !== 'concat') throw new Error('SLOT_KV_EDIT off did not keep the concat path')

    const rounds = ctx.quick ? 2 : 4
    const steps = ctx.quick ? NEW_TOKENS / 2 : NEW_TOKENS
    const { vocabSize: vocab } = slotsDir.config
    const eos = slotsDir.eosTokenIds
    // One untimed pass each: the first runs allocate ONNX Runtime's arenas.
    for (const [i, l] of LAYOUTS.entries()) await runnerDecode(runners.get(l)!, STREAMS, PROMPT_TOKENS, 4, vocab, eos, 10_000_000 * (i + 1))
    const rows: Array<Record<Layout, number>> = []
    for (let r = 0; r < rounds; r++) {
      const row = {} as Record<Layout, number>
      for (const l of rotate(LAYOUTS, r)) {
        row[l] = (await runnerDecode(runners.get(l)!, STREAMS, PROMPT_TOKENS, steps, vocab, eos, 1_000_000 * (r + 1) + 100_000 * LAYOUTS.indexOf(l))).tokPerS
      }
      rows.push(row)
      ctx.log(`optimum layout round ${r + 1}/${rounds}, B=${STREAMS}, ${steps} decode steps: slots ${row.slots.toFixed(0)} tok/s, concat edited ${row.concat_edited.toFixed(0)}, concat unedited ${row.concat_unedited.toFixed(0)}`)
    }
    const ratio = (l: Layout) => median(rows.map((x) => x[l] / x.slots))
    raw.optimum_layout = {
      kv_paths: paths,
      rounds,
      decode_steps: steps,
      slots_tok_s: round(median(rows.map((x) => x.slots))),
      concat_edited_tok_s: round(median(rows.map((x) => x.concat_edited))),
      concat_unedited_tok_s: round(median(rows.map((x) => x.concat_unedited))),
      concat_unedited_over_slots: round(ratio('concat_unedited')),
      rounds_tok_s: rows.map((x) => Object.fromEntries(Object.entries(x).map(([k, v]) => [k, round(v)]))),
    }
    notes.push(`Optimum layout / slot: small generated twice from seed ${SEED} (slot KV; Optimum's concat KV, edited at load onto the slot KV path), each in the worker-thread runner: ${STREAMS} prompts of ${PROMPT_TOKENS} tokens, then ${steps} decode steps back to back at batch ${STREAMS}; median over ${rounds} rounds of the per-round ratio. The unedited concat path (SLOT_KV_EDIT=0) in the same rounds: engine.raw.optimum_layout.concat_unedited_over_slots.`)
    return round(ratio('concat_edited'))
  } finally {
    for (const r of runners.values()) await r.close().catch(() => {})
    rmSync(root, { recursive: true, force: true })
  }
}
