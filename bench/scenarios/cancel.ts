/**
 * Cancellation: 50 clients open streams to a GPU node (small model, default settings)
 * and hang up mid-stream, each after a different number of tokens (2–8), so disconnects land on
 * every phase of a step. The node counts, per aborted sequence, the model steps started between
 * the abort and the release of its KV (`zl_abort_free_steps`, buckets 1, 2, 3, 5, 10; 1 when the
 * engine was idle, 2 when a step was already running). The figure is how many of the disconnected
 * streams were freed within two steps (the `le="2"` bucket), out of the streams that did
 * disconnect mid-stream.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { ensureGeneratedModel } from '../../gpu-node/tools/generate-model/ensure-model.ts'
import { benchAgent, sendRequest } from '../load/client.ts'
import { buildBody, type BenchDialect } from '../load/dialects.ts'
import { parseProm, promValue } from '../lib/prom.ts'
import { chatPromptOfLength } from '../lib/prompts.ts'
import type { BenchContext, SectionResult } from '../lib/report-types.ts'
import { startGpuNode } from '../lib/services.ts'
import { round, summarize } from '../lib/stats.ts'

const CLIENTS = 50

export async function runCancel(ctx: BenchContext, opts: { modelDir?: string } = {}): Promise<SectionResult> {
  const modelDir = opts.modelDir ?? 'models/small'
  await ensureGeneratedModel(modelDir, (l) => ctx.log(l))
  ctx.log(`starting a GPU node (${modelDir})`)
  const node = await startGpuNode({ modelDir })
  const agent = benchAgent()
  try {
    const prompt = chatPromptOfLength(modelDir, 32)
    const body = (d: BenchDialect) => buildBody(d, { model: node.model, text: prompt.text, maxTokens: 400, stream: true, ignoreEos: true })
    const bodies = { 'openai-chat': body('openai-chat'), 'anthropic-messages': body('anthropic-messages') }
    // Warm-up (not counted: it completes normally).
    await sendRequest({ origin: node.url, dialect: 'openai-chat', body: buildBody('openai-chat', { model: node.model, text: prompt.text, maxTokens: 4, stream: true, ignoreEos: true }), stream: true, dispatcher: agent })
    const before = parseProm(await node.metricsText())
    ctx.log(`${CLIENTS} clients stream and hang up after 2–8 tokens`)
    const recs = await Promise.all(
      Array.from({ length: CLIENTS }, (_, i) => {
        const dialect: BenchDialect = i % 2 ? 'anthropic-messages' : 'openai-chat'
        return sendRequest({ origin: node.url, dialect, body: bodies[dialect], stream: true, dispatcher: agent, abortAfterTextFrames: 2 + (i % 7), timeoutMs: 120_000 })
      }),
    )
    const tried = recs.filter((r) => r.clientAborted).length
    // The node applies aborts between steps: wait (bounded) until it has recorded every one.
    const deadline = Date.now() + 30_000
    let after = parseProm(await node.metricsText())
    const delta = (name: string, labels: Record<string, string> = {}) => promValue(after, name, labels) - promValue(before, name, labels)
    while (delta('zl_abort_free_steps_count') < tried && Date.now() < deadline) {
      await sleep(200)
      after = parseProm(await node.metricsText())
    }
    const freed = delta('zl_abort_free_steps_count')
    const within1 = delta('zl_abort_free_steps_bucket', { le: '1' })
    const within2 = delta('zl_abort_free_steps_bucket', { le: '2' })
    const within3 = delta('zl_abort_free_steps_bucket', { le: '3' })
    const clientAborted = delta('zl_request_failure_total', { reason: 'client_aborted' })
    ctx.log(`${tried} disconnected mid-stream; node freed ${freed}: ${within1} within 1 step, ${within2} within 2, ${within3} within 3`)
    return {
      figures: { stopped_within_two_steps: within2, tried },
      raw: {
        model: modelDir,
        clients: CLIENTS,
        disconnected_mid_stream: tried,
        never_got_a_token: recs.filter((r) => !r.clientAborted && r.textFrames === 0).length,
        errors: recs.filter((r) => r.error).map((r) => r.error).slice(0, 5),
        node_freed: freed,
        freed_within_steps: { '1': within1, '2': within2, '3': within3, '5': delta('zl_abort_free_steps_bucket', { le: '5' }), '10': delta('zl_abort_free_steps_bucket', { le: '10' }) },
        mean_steps: round(delta('zl_abort_free_steps_sum') / Math.max(1, freed)),
        node_client_aborted: clientAborted,
        tokens_before_hangup: summarize(recs.map((r) => r.textFrames)),
      },
      notes: [],
    }
  } finally {
    await agent.close()
    await node.stop()
  }
}
