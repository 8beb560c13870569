/**
 * A TTFT probe in its own process (bench/scenarios/realtime.ts): streaming completions to a GPU
 * node one after another, `intervalMs` after each answer, until `durationMs` has passed; prints
 * their TTFTs as one JSON line. In the process that also drives the load's streams, the probe's
 * own event loop would delay the first tokens it measures, which the node had already sent.
 * Once started it prints `ready`; its prompts then come on stdin as a JSON array of strings, one
 * per request in order (cycled if it runs out): made by the caller before the load starts, so no
 * prompt search (bench/lib/prompts.ts, 6–18 ms of CPU each) runs on the node's cores while it
 * measures.
 *   argv: NODE_URL MODEL MAX_TOKENS DURATION_MS INTERVAL_MS [PRIORITY]
 */
import { text } from 'node:stream/consumers'
import { benchAgent, streamCompletion } from '../load/client.ts'

const [url, model, maxTokens, durationMs, intervalMs, priority] = process.argv.slice(2)
// Started, its modules loaded: the caller sends the prompts once every probe has said so, so no
// probe's start-up runs beside another's measured requests.
process.stdout.write('ready\n')
const prompts = JSON.parse(await text(process.stdin)) as string[]
const agent = benchAgent()
const ttfts: number[] = []
const started = performance.now()
for (let i = 0; performance.now() - started < Number(durationMs); i++) {
  const r = await streamCompletion(url!, model!, prompts[i % prompts.length]!, Number(maxTokens), { headers: priority ? { 'x-zl-priority': priority } : {}, dispatcher: agent })
  // The first opens the connection and runs this process's client code cold (measured: 59–102 ms
  // against ~25 after it): not counted, as the idle TTFT's warm-up requests are not.
  if (r.ttftMs !== undefined && i > 0) ttfts.push(r.ttftMs)
  await new Promise((res) => setTimeout(res, Number(intervalMs)))
}
await agent.close()
process.stdout.write(`${JSON.stringify({ ttfts })}\n`)
