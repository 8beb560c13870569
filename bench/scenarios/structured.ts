/**
 * Structured output's costs on the node (gpu-node/src/structured/), in process, on the `small`
 * preset's 32000-token byte-level vocabulary — the model's logits are not needed for either:
 * - `structured.compile_ms_p50`: compiling typical response and tool schemas (a few properties,
 *   enums, bounded strings and arrays, an integer range), each new to the engine, as the first
 *   request with that schema pays it; the tokenizer info and compiler, built once per model,
 *   reported apart.
 * - `structured.mask_us_per_token_p50`: one row's mask + accept per token (the grammar's bitmask,
 *   the logits masked, the control-byte and UTF-8 rules, the matcher advanced), over walks that
 *   sample from seeded random logits within the mask until the grammar ends.
 * Then on the model itself (structured-engine.ts), one engine built as the node builds it:
 * - `structured.json_schema_over_free_tokens_per_s`: 32 rows each constrained by a bounded object
 *   schema ÷ the same 32 rows free, as many tokens row by row, tokens/s.
 * - `structured.n4_over_n1_time`: one request with n = 4 ÷ one with n = 1, wall time (32 new
 *   tokens, a 120-token prompt), n submitted as the node's route submits it.
 */
import { performance } from 'node:perf_hooks'
import { argmax } from '../../gpu-node/src/sampling/sampler.ts'
import { readModelDir } from '../../gpu-node/src/model/model-dir.ts'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { Grammars } from '../../gpu-node/src/structured/grammars.ts'
import { encodedVocab } from '../../gpu-node/src/structured/tokenizer-info.ts'
import { seededRandom } from '../../shared/test/support/seeded-random.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { median, round, summarize } from '../lib/stats.ts'
import { runStructuredEngine } from './structured-engine.ts'

/** A typical tool or response schema; `i` makes each one new to the compiler. */
function schema(i: number): string {
  return JSON.stringify({
    type: 'object',
    properties: {
      [`city_${i}`]: { type: 'string', minLength: 1, maxLength: 40 },
      unit: { enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer', minimum: 1, maximum: 14 },
      tags: { type: 'array', items: { type: 'string', maxLength: 12 }, maxItems: 4 },
      urgent: { type: 'boolean' },
    },
    required: [`city_${i}`, 'unit', 'days'],
    additionalProperties: false,
  })
}

export async function runStructured(ctx: BenchContext, opts: { modelDir: string }): Promise<SectionResult> {
  if (await ensureGeneratedModel(opts.modelDir, (l) => ctx.log(l))) ctx.log(`generated ${opts.modelDir}`)
  const dir = readModelDir(opts.modelDir)
  const vocabSize = dir.config.vocabSize
  const grammars = new Grammars(encodedVocab(dir.tokenizerJson, vocabSize), dir.eosTokenIds)
  let t = performance.now()
  await grammars.compile({ kind: 'json_object' })
  const setupMs = performance.now() - t
  ctx.log(`tokenizer info + compiler for ${vocabSize} tokens, with JSON mode's grammar: ${round(setupMs, 1)} ms`)

  const schemas = ctx.quick ? 4 : 12
  const compileMs: number[] = []
  for (let i = 0; i < schemas; i++) {
    t = performance.now()
    await grammars.compile({ kind: 'json_schema', schema: schema(i) })
    compileMs.push(performance.now() - t)
  }
  ctx.log(`compile, ${schemas} new schemas: p50 ${round(median(compileMs), 1)} ms (${compileMs.map((m) => round(m, 0)).join(', ')})`)

  const walks = ctx.quick ? 8 : 32
  const perToken: number[] = []
  const lengths: number[] = []
  for (let w = 0; w < walks; w++) {
    const c = await grammars.constraint({ kind: 'json_schema', schema: schema(w % schemas) })
    const random = seededRandom(w + 1)
    let n = 0
    try {
      while (!c.terminated && n < 400) {
        const logits = new Float32Array(vocabSize)
        for (let i = 0; i < vocabSize; i++) logits[i] = random()
        t = performance.now()
        await c.mask(logits)
        const token = argmax(logits)
        if (!c.accept(token)) throw new Error(`walk ${w}: the grammar refused a token it allowed`)
        perToken.push((performance.now() - t) * 1000)
        n++
      }
      if (!c.terminated) throw new Error(`walk ${w}: not finished in 400 tokens`)
    } finally {
      c.dispose()
    }
    lengths.push(n)
  }
  const maskUs = median(perToken)
  ctx.log(`mask + accept per token per row, ${walks} walks (${median(lengths)} tokens median): p50 ${round(maskUs, 1)} µs`)

  const onModel = await runStructuredEngine(ctx, opts.modelDir)
  return {
    figures: { mask_us_per_token_p50: round(maskUs, 1), compile_ms_p50: round(median(compileMs), 1), ...onModel.figures },
    raw: { vocab_size: vocabSize, setup_ms: round(setupMs, 1), compile_ms: summarize(compileMs), mask_us: summarize(perToken), walk_tokens: summarize(lengths), model: opts.modelDir, ...onModel.raw },
    notes: ['Structured output: xgrammar (@mlc-ai/web-xgrammar) in this process on the small preset\'s vocabulary; mask + accept timed per token around the sampler\'s argmax (excluded).', ...onModel.notes],
  }
}
