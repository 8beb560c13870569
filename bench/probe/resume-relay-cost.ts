/**
 * What the edge's resume code costs per frame on the Workers path (web streams, no relay), in
 * one process so the figures are a ratio, not two noisy runs: one long SSE stream (default 900
 * chat frames, each with its `id:` line, one frame per chunk as a node writes them) read through
 *   plain:     passThrough(node body)                         — MAX_RESUMES=0, no id lines
 *   resumable: passThrough(resumableBody(node body))          — the default, with id lines
 * CPU time per stream (process.cpuUsage, after warm-up) and instructions when run under
 * `valgrind --tool=callgrind` (then use --rounds 3).
 *   npx tsx bench/probe/resume-relay-cost.ts [--frames 900] [--rounds 200] [--only plain|resumable]
 */
import { parseArgs } from 'node:util'
import { getDialect } from '../../shared/src/dialects/index.ts'
import { resumeIdLine } from '../../shared/src/resume-wire.ts'
import { streamEndsOf } from '../../edge/src/proxy/frame-scanner.ts'
import { passThrough, type UpstreamBody } from '../../edge/src/proxy/pass-through.ts'
import { resumableBody } from '../../edge/src/proxy/resumable-body.ts'

const { values } = parseArgs({ options: { frames: { type: 'string', default: '900' }, rounds: { type: 'string', default: '200' }, only: { type: 'string' } } })
const FRAMES = Number(values.frames)
const ROUNDS = Number(values.rounds)
const enc = new TextEncoder()
const codec = getDialect('openai-chat')

/** The chunks a node sends for one stream: preamble, FRAMES content frames (with or without id lines), finish, [DONE]. */
function chunks(ids: boolean): Uint8Array[] {
  const head = 'data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1764590000,"model":"tiny","choices":[{"index":0,"delta":'
  const out = [enc.encode(`${head}{"role":"assistant","content":""},"finish_reason":null}]}\n\n`)]
  for (let i = 0; i < FRAMES; i++) out.push(enc.encode(`${ids ? resumeIdLine(i + 1, [100 + (i % 300)]) : ''}${head}{"content":" w${i % 97}"},"finish_reason":null}]}\n\n`))
  out.push(enc.encode(`${head}{},"finish_reason":"length"}]}\n\n`), enc.encode('data: [DONE]\n\n'))
  return out
}

/** A fetch body: a web stream handing one chunk per pull (as a socket read would). */
function nodeBody(parts: readonly Uint8Array[]): UpstreamBody {
  let i = 0
  const body = new ReadableStream<Uint8Array>(
    {
      pull(c) {
        if (i < parts.length) c.enqueue(parts[i++]!)
        else c.close()
      },
    },
    { highWaterMark: 0 },
  )
  return { body }
}

async function relay(kind: 'plain' | 'resumable', parts: readonly Uint8Array[]): Promise<number> {
  const up = nodeBody(parts)
  const body = kind === 'plain' ? up : resumableBody(up, { ends: streamEndsOf(codec), maxResumes: 2, stallMs: 15_000, reopen: async () => undefined })
  const { readable, finished } = passThrough(body, { codec, sse: true, now: Date.now })
  let bytes = 0
  const reader = readable.getReader()
  for (;;) {
    const r = await reader.read()
    if (r.done) break
    bytes += r.value.byteLength
  }
  await finished
  return bytes
}

async function measure(kind: 'plain' | 'resumable'): Promise<{ cpuUsPerStream: number; bytes: number }> {
  const parts = chunks(kind === 'resumable')
  let bytes = 0
  for (let i = 0; i < Math.min(20, ROUNDS); i++) bytes = await relay(kind, parts)
  const t0 = process.cpuUsage()
  for (let i = 0; i < ROUNDS; i++) await relay(kind, parts)
  const t = process.cpuUsage(t0)
  return { cpuUsPerStream: (t.user + t.system) / ROUNDS, bytes }
}

const kinds = values.only ? [values.only as 'plain' | 'resumable'] : (['plain', 'resumable', 'plain', 'resumable'] as const)
const results: Record<string, number[]> = {}
for (const k of kinds) {
  const r = await measure(k)
  ;(results[k] ??= []).push(r.cpuUsPerStream)
  console.log(`${k.padEnd(9)} ${FRAMES} frames, ${r.bytes} bytes: ${(r.cpuUsPerStream / 1000).toFixed(2)} ms CPU per stream, ${(r.cpuUsPerStream / FRAMES).toFixed(2)} µs per frame`)
}
if (results.plain && results.resumable) {
  const best = (xs: number[]) => Math.min(...xs)
  console.log(`resumable ÷ plain (best of each): ${(best(results.resumable) / best(results.plain)).toFixed(2)}`)
}
