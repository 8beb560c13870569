/**
 * Bench-only: the edge's body check alone, for instruction counts under callgrind
 * (docs/PERFORMANCE.md, the edge's piece costs). Takes commands over the IPC channel: `{ mode, size, count }` runs `count`
 * times, over the bench's OpenAI chat body of that size (`1kb` | `100kb`), either
 * `full` (UTF-8 decode + JSON.parse + the dialect's zod parser: what parseGenerate does) or
 * `json` (decode + JSON.parse only), or `affinity` (the edge's affinity key over the already
 * parsed request, edge/src/routing/affinity-key.ts: the other per-request cost that grows with the
 * body), or `sign` (the edge's request signature, shared/src/signature.ts `signRequest` with
 * shared/src/node-digest.ts: SHA-256 of the body, then an HMAC of the short signed string), then
 * answers `{ done: true }`. Prints {"msg":"ready"} first.
 */
import { affinityKeyOf } from '../../edge/src/routing/affinity-key.ts'
import { openAIChatCodec } from '../../shared/src/dialects/openai-chat.ts'
import { parseJsonBody } from '../../shared/src/json-body.ts'
import { nodeDigest } from '../../shared/src/node-digest.ts'
import { signRequest } from '../../shared/src/signature.ts'
import { buildBody } from '../load/dialects.ts'

const text = (bytes: number) => 'lorem ipsum dolor sit amet '.repeat(Math.ceil(bytes / 27)).slice(0, bytes)
const bodies: Record<string, Uint8Array> = {
  '1kb': buildBody('openai-chat', { model: 'bench-instant', text: text(900), maxTokens: 16, stream: false }),
  '100kb': buildBody('openai-chat', { model: 'bench-instant', text: text(100_000), maxTokens: 16, stream: false }),
}
const parsed = new Map(Object.values(bodies).map((b) => [b, openAIChatCodec.parse(parseJsonBody(b))]))
let sink = 0
const SECRET = 'bench-edge-shared-secret-0123456789abcdef'
const modes: Record<string, (b: Uint8Array) => void> = {
  full: (b) => void (sink += openAIChatCodec.parse(parseJsonBody(b)).maxTokens ?? 0),
  json: (b) => void (sink += (parseJsonBody(b) as { max_tokens: number }).max_tokens),
  // Synchronous on node:crypto (the Digest type allows a promise for Web Crypto).
  sign: (b) => void (sink += (signRequest({ secret: SECRET, method: 'POST', path: '/v1/chat/completions', requestId: `req_${'0'.repeat(32)}`, body: b, nowMs: 1764600000000 }, nodeDigest) as string).length),
  affinity: (b) => void (sink += affinityKeyOf(parsed.get(b)!, 'bench-tenant').point),
}
process.on('message', (m: { mode: string; size: string; count: number }) => {
  const run = modes[m.mode]
  const body = bodies[m.size]
  if (!run || !body) return void process.send?.({ error: `unknown mode or size: ${m.mode} ${m.size}` })
  for (let i = 0; i < m.count; i++) run(body)
  process.send?.({ done: true, sink })
})
console.log(JSON.stringify({ msg: 'ready' }))
