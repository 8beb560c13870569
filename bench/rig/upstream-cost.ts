/**
 * Bench-only: one upstream client alone, for instruction counts under callgrind (the client's
 * share of the edge's forward stage). IPC `{ client, count }` sends `count` POSTs of the bench's
 * 1 kB chat body, one after another, to UPSTREAM_URL (the instant upstream), reads each answer
 * whole, then answers `{ done: true }`. Clients:
 * - `h2_upstream`: the Node edge's own to other regions (edge/src/proxy/h2-upstream.ts: one
 *   node:http2 session);
 * - `h1_upstream`: the Node edge's own to its region (edge/src/proxy/h1-upstream.ts: undici's
 *   HTTP/1.1 Pool through the edge's handler and answer object);
 * - `undici_h2`: an undici Agent over one h2c connection with the settings the edge used before
 *   (`connections: 1`, `pipelining` 128, `idempotent: true`, byte bodies), through the dispatcher
 *   API with a handler that only collects the body (what the edge's own handler did, less its
 *   answer object);
 * - `undici_h1`: undici's HTTP/1.1 Pool the bare passthrough uses, through the same handler;
 * - `node_h2`: node:http2's `session.request` with only a 'data' and an 'end' listener: the
 *   floor under `h2_upstream`, whatever the edge's module does on top.
 * Prints {"msg":"ready"} first.
 */
import http2 from 'node:http2'
import { Agent, Pool, type Dispatcher } from 'undici'
import { createH1Upstream } from '../../edge/src/proxy/h1-upstream.ts'
import { createH2Upstream } from '../../edge/src/proxy/h2-upstream.ts'
import { buildBody } from '../load/dialects.ts'

const upstream = process.env.UPSTREAM_URL
if (!upstream) throw new Error('UPSTREAM_URL is required')
const PATH = '/v1/chat/completions'
const body = buildBody('openai-chat', { model: 'bench-instant', text: 'lorem ipsum dolor sit amet '.repeat(34).slice(0, 900), maxTokens: 16, stream: false })
const headers = { 'content-type': 'application/json', accept: 'application/json', 'x-request-id': `req_${'0'.repeat(32)}` }

const h2 = createH2Upstream({ connectTimeoutMs: 60_000 })
const h1 = createH1Upstream({ connectTimeoutMs: 60_000 })
// `useH2c` is read by undici's Client but missing from its option types.
const agent = new Agent({ allowH2: true, useH2c: true, connections: 1, pipelining: 128, maxConcurrentStreams: 128, headersTimeout: 0, bodyTimeout: 0 } as Agent.Options)
const pool = new Pool(upstream, { connections: 128, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 })
const session = http2.connect(upstream)

function nodeH2(): Promise<number> {
  return new Promise((resolve, reject) => {
    let bytes = 0
    const stream = session.request({ ...headers, ':method': 'POST', ':path': PATH })
    stream.on('data', (chunk: Buffer) => (bytes += chunk.byteLength))
    stream.on('end', () => resolve(bytes))
    stream.on('error', reject)
    stream.end(body)
  })
}

/** One request through undici's dispatcher, the body collected and nothing else. */
function dispatch(d: Dispatcher, extra: Partial<Dispatcher.DispatchOptions>): Promise<number> {
  return new Promise((resolve, reject) => {
    let bytes = 0
    d.dispatch(
      { origin: upstream, path: PATH, method: 'POST', headers, body, ...extra },
      {
        onConnect() {},
        onHeaders: () => true,
        onData: (chunk: Buffer) => ((bytes += chunk.byteLength), true),
        onComplete: () => resolve(bytes),
        onError: reject,
      },
    )
  })
}

const clients: Record<string, () => Promise<number>> = {
  h2_upstream: async () => (await (await h2.fetch(upstream + PATH, { method: 'POST', headers, body })).arrayBuffer()).byteLength,
  h1_upstream: async () => (await (await h1.fetch(upstream + PATH, { method: 'POST', headers, body })).arrayBuffer()).byteLength,
  undici_h2: () => dispatch(agent, { idempotent: true }),
  undici_h1: () => dispatch(pool, {}),
  node_h2: nodeH2,
}

let sink = 0
process.on('message', (m: { client: string; count: number }) => {
  const send = clients[m.client]
  if (!send) return void process.send?.({ error: `unknown client: ${m.client}` })
  void (async () => {
    for (let i = 0; i < m.count; i++) sink += await send()
    process.send?.({ done: true, sink })
  })().catch((e: unknown) => process.send?.({ error: String(e) }))
})
console.log(JSON.stringify({ msg: 'ready' }))
