/**
 * Bench-only stand-in for a GPU node that answers every generate request at once with a fixed,
 * small, non-streaming OpenAI chat completion — so a load test through the edge measures the
 * edge's own cost (auth, rate limit, validation, signing, proxying), not inference. It uses the
 * node's own listener (gpu-node/src/server/http.ts): HTTP/1.1 and h2c with prior knowledge on one
 * port, as the edge expects. Prints `{"msg":"ready","url":...}`. Env: PORT (0 = any).
 */
import { createNodeServer } from '../../gpu-node/src/server/http.ts'
import type { ServerRequest, ServerResponse } from '../../gpu-node/src/server/http-types.ts'

export const INSTANT_MODEL = 'bench-instant'

const answer = JSON.stringify({
  id: 'chatcmpl-bench-instant',
  object: 'chat.completion',
  created: 0,
  model: INSTANT_MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 8, completion_tokens: 1, total_tokens: 9 },
})
const headers = { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(answer)) }

const server = createNodeServer({
  handler(req: ServerRequest, res: ServerResponse) {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, headers)
      res.end(answer)
    })
  },
})
const addr = await server.listen(Number(process.env.PORT ?? 0), '127.0.0.1')
console.log(JSON.stringify({ msg: 'ready', url: `http://127.0.0.1:${addr.port}` }))
const stop = () => void server.close(500).then(() => process.exit(0))
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
