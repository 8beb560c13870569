/**
 * Bench-only stand-in for a GPU node that answers every generate request at once with a fixed,
 * small OpenAI chat completion — a JSON body, or, when the request asks `"stream":true`, the
 * same answer as a short SSE stream (role, one text chunk, finish, usage, [DONE]) — so a load test through the edge measures the
 * edge's own cost (auth, rate limit, validation, signing, proxying), not inference. It uses the
 * node's own listener (gpu-node/src/server/http.ts): HTTP/1.1 and h2c with prior knowledge on one
 * port, as the edge expects. Prints `{"msg":"ready","url":...}`. Env: PORT (0 = any).
 */
import { INSTANT_MODEL } from '../lib/bench-edge.ts'
import { createNodeServer } from '../../gpu-node/src/server/http.ts'
import { end, write, type ServerRequest, type ServerResponse } from '../../gpu-node/src/server/http-types.ts'


const answer = JSON.stringify({
  id: 'chatcmpl-bench-instant',
  object: 'chat.completion',
  created: 0,
  model: INSTANT_MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop', logprobs: null }],
  usage: { prompt_tokens: 8, completion_tokens: 1, total_tokens: 9 },
})
const headers = { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(answer)) }
const chunk = (delta: Record<string, unknown>, finish: string | null, usage?: Record<string, number>) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-bench-instant', object: 'chat.completion.chunk', created: 0, model: INSTANT_MODEL, choices: usage ? [] : [{ index: 0, delta, finish_reason: finish, logprobs: null }], ...(usage ? { usage } : {}) })}\n\n`
const streamed = [
  chunk({ role: 'assistant', content: '' }, null),
  chunk({ content: 'ok' }, null),
  chunk({}, 'stop'),
  chunk({}, null, { prompt_tokens: 8, completion_tokens: 1, total_tokens: 9 }),
  'data: [DONE]\n\n',
]
const sseHeaders = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }
// Bodies the bench sends are compact JSON (JSON.stringify), so the flag is found as written.
const STREAM_FLAG = Buffer.from('"stream":true')

const server = createNodeServer({
  handler(req: ServerRequest, res: ServerResponse) {
    let stream = false
    let tail = Buffer.alloc(0)
    req.on('data', (b: Buffer) => {
      if (stream) return
      const joined = Buffer.concat([tail, b])
      stream = joined.includes(STREAM_FLAG)
      tail = joined.subarray(Math.max(0, joined.length - STREAM_FLAG.length))
    })
    req.on('end', () => {
      if (!stream) {
        res.writeHead(200, headers)
        res.end(answer)
        return
      }
      // One write per frame, as the node sends them (each its own chunk on the wire).
      res.writeHead(200, sseHeaders)
      for (const frame of streamed.slice(0, -1)) write(res, frame)
      end(res, streamed.at(-1))
    })
  },
})
const addr = await server.listen(Number(process.env.PORT ?? 0), '127.0.0.1')
console.log(JSON.stringify({ msg: 'ready', url: `http://127.0.0.1:${addr.port}` }))
const stop = () => void server.close(500).then(() => process.exit(0))
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
