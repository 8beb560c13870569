/**
 * The trained model's README.md (its model card), from the recipe and what the scripts measured:
 * `training.json` (train.py: parameters, tokens, time, held-out loss) and `eval.json` (eval.ts).
 * Rewritten by `npm run model:train` and again by `npm run model:eval`.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { CHAT_KEEP, FIM_RATE, FIM_SPAN_CHARS, LINE_FIM_SHARE } from './dataset.ts'
import { MODEL_NAME, SCHEDULE, SHAPE } from './recipe.ts'

const read = (path: string): Record<string, unknown> | undefined => (existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>) : undefined)

export function writeModelCard(modelDir: string): void {
  const training = read(join(modelDir, 'training.json'))
  const evaluation = read(join(modelDir, 'eval.json'))
  const fmt = (v: unknown, unit = '') => (v === undefined || v === null ? '—' : `${v}${unit}`)
  const share = (k: unknown, n: unknown) => (typeof k === 'number' && typeof n === 'number' ? `${k} of ${n} (${Math.round((1000 * k) / n) / 10} %)` : '—')
  const pct = (x: number) => `${Math.round(x * 100)} %`
  const lines = [
    `# ${MODEL_NAME}`,
    '',
    "zerolayer's default model: a small code model trained from scratch on CPU by `npm run model:train`",
    '(gpu-node/tools/train-model/), served by `npm start` and `npm run gpu-node`. It completes Python, fills in',
    'the middle (`suffix` on `/v1/completions`) and answers chat requests for a function. It is small: its',
    'answers are plausible Python, not reliable code.',
    '',
    '## Data and license',
    '- The CPython standard library as this machine has it (`/usr/lib/python3.11`, Debian `libpython3.11-stdlib`),',
    '  under the PSF License Agreement: every `*.py` file outside test suites and installed packages.',
    '- 1 file in 20 (by a hash of its path) is held out for evaluation and never trained on.',
    `- Each file is cut into spans of whole lines of at most ${FIM_SPAN_CHARS} characters; ${pct(FIM_RATE)} of them (seeded) are fill-in-the-middle`,
    `  samples in StarCoder's prefix–suffix–middle order: ${pct(LINE_FIM_SHARE)} of those take out 1–4 whole lines, the rest cut at two random characters.`,
    '- Chat pairs are derived from the same files: a function\'s signature and first docstring line as the',
    `  request, the function as the answer, in the model's ChatML template; ${pct(CHAT_KEEP)} of them (seeded) are trained on.`,
    '- The weights are derived from that code only: no other data, no pretrained weights.',
    '',
    '## Shape',
    `- Llama-style decoder: ${SHAPE.num_hidden_layers} layers, width ${SHAPE.hidden_size}, ${SHAPE.num_attention_heads} query heads sharing ${SHAPE.num_key_value_heads} KV heads, SwiGLU ${SHAPE.intermediate_size}, RoPE θ ${SHAPE.rope_theta}, RMSNorm, untied LM head: ${fmt(training?.params)} parameters.`,
    `- Byte-level BPE of ${SHAPE.vocab_size} tokens learned from the training files, with \`<|endoftext|>\`, \`<|im_start|>\`, \`<|im_end|>\`, \`<fim_prefix>\`, \`<fim_middle>\`, \`<fim_suffix>\`, \`<fim_pad>\`.`,
    `- ${SHAPE.max_position_embeddings} positions. Exported with \`torch.onnx\` under Optimum's input and output names, shipped as \`onnx/model_q4.onnx\` (onnx-community's layout): every weight matrix 4-bit MatMulNBits (blocks of 32), embeddings float32.`,
    '',
    '## Training',
    `\`npm run model:train\`: ${SCHEDULE.steps} steps of ${SCHEDULE.batch_tokens} tokens (${fmt(training?.train_tokens_seen)} tokens), AdamW at ${SCHEDULE.lr} with ${SCHEDULE.warmup} warm-up steps and a cosine to a tenth, weight decay ${SCHEDULE.weight_decay}, bfloat16 matrix products, seed ${SCHEDULE.seed}; the last ${SCHEDULE.long_share * 100} % of steps at the full context, the rest at ${SCHEDULE.short_context}; ${pct(SCHEDULE.aligned_share)} of the windows start where a sample starts, the rest anywhere. It took ${fmt(training?.train_seconds, ' s')} on ${fmt(training?.threads)} threads of a 2-core ${fmt(training?.cpu)}.`,
    '',
    '## Evaluation (`npm run model:eval`)',
    '| measure | value |',
    '|---|---|',
    `| held-out loss, nats per token (perplexity), the shipped 4-bit graph | ${fmt(evaluation?.held_out_loss)} (${fmt(evaluation?.held_out_perplexity)}) |`,
    `| the same, the float32 export it was quantized from (4-bit ÷ float32) | ${fmt(evaluation?.held_out_loss_float32)} (${fmt(evaluation?.quantized_over_float32_loss)}) |`,
    `| held-out functions completed from signature + docstring (≤ 128 tokens, greedy) that parse | ${share(evaluation?.parsed, evaluation?.parse_cases)} (the random \`tiny\` preset: 0) |`,
    `| the same, among those whose own body fits in 128 tokens | ${share(evaluation?.parsed_fitting, evaluation?.fitting_cases)} |`,
    `| infill: the removed middle line of a held-out function reproduced exactly | ${share(evaluation?.infill_exact, evaluation?.infill_cases)} |`,
    `| TTFT of a 512-token prompt through a GPU node | ${fmt(evaluation?.ttft_512_ms, ' ms')} |`,
    `| tokens/s, one request / 32 at once | ${fmt(evaluation?.tokens_per_s_b1)} / ${fmt(evaluation?.tokens_per_s_b32)} |`,
    `| the same through \`npm start -- --regions 1\` (its default edge; its nodes run one ONNX Runtime thread each): TTFT, tokens/s alone / 32 at once | ${fmt(evaluation?.stack_ttft_512_ms, ' ms')}, ${fmt(evaluation?.stack_tokens_per_s_b1)} / ${fmt(evaluation?.stack_tokens_per_s_b32)} |`,
    '',
  ]
  writeFileSync(join(modelDir, 'README.md'), lines.join('\n'))
}
