/**
 * A TTFT probe in its own process (bench/scenarios/realtime.ts): streaming completions to a GPU
 * node one after another, `intervalMs` after each answer, until `durationMs` has passed; prints
 * their TTFTs as one JSON line. In the process that also drives the load's streams, the probe's
 * own event loop would delay the first tokens it measures, which the node had already sent.
 *   argv: NODE_URL MODEL MODEL_DIR PROMPT_TOKENS MAX_TOKENS DURATION_MS INTERVAL_MS VARIANT [PRIORITY]
 */
import { textPromptOfLength } from '../lib/prompts.ts'
import { benchAgent, streamCompletion } from '../load/client.ts'

const [url, model, modelDir, promptTokens, maxTokens, durationMs, intervalMs, variant, priority] = process.argv.slice(2)
const agent = benchAgent()
const ttfts: number[] = []
const started = performance.now()
for (let i = 0; performance.now() - started < Number(durationMs); i++) {
  const text = textPromptOfLength(modelDir!, Number(promptTokens), Number(variant) + i).text
  const r = await streamCompletion(url!, model!, text, Number(maxTokens), { headers: priority ? { 'x-zl-priority': priority } : {}, dispatcher: agent })
  if (r.ttftMs !== undefined) ttfts.push(r.ttftMs)
  await new Promise((res) => setTimeout(res, Number(intervalMs)))
}
await agent.close()
process.stdout.write(`${JSON.stringify({ ttfts })}\n`)
