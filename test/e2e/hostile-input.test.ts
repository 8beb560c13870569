/**
 * Hostile input through both edges of the local stack, the Workers edge as `npm start` runs it
 * (Miniflare) and the Node entry beside it, at concurrency 8 over Node's fetch (keep-alive
 * connections reused request after request, as the SDKs do): malformed and mistyped bodies,
 * wrong content types, missing, unknown and ambiguous keys, and bodies over MAX_BODY_BYTES sent
 * chunked and with a content-length. Every request gets an answer — a 4xx in its dialect's error
 * shape that never echoes the prompt — and none a reset: a connection error counts as a failure.
 *
 * Control: before body-limit.ts read and dropped a refused body, the large bodies reset the
 * client through workerd (ECONNRESET), and through the Node entry a chunked 413 left its
 * keep-alive connection closed, so the next request on it failed (`other side closed`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestStack, type TestStack } from './support/stack.ts'

/** Put in every prompt: no answer may contain it. */
const SECRET = 'SECRET-PROMPT-31c9e2'
const CONCURRENCY = 8
const ROUNDS = 3
const MAX_BODY_BYTES = 1024 * 1024

let stack: TestStack
let nodeEdgeUrl: string

beforeAll(async () => {
  stack = await startTestStack({ regions: 1 })
  nodeEdgeUrl = await stack.startNodeEdge('edge-node')
})

afterAll(async () => {
  await stack?.stop()
})

const CHAT = '/v1/chat/completions'
const COMPLETIONS = '/v1/completions'
const MESSAGES = '/v1/messages'
type Path = typeof CHAT | typeof COMPLETIONS | typeof MESSAGES

function valid(path: Path, prompt = SECRET): Record<string, unknown> {
  if (path === COMPLETIONS) return { model: 'tiny', prompt, max_tokens: 2 }
  return { model: 'tiny', messages: [{ role: 'user', content: prompt }], max_tokens: 2 }
}

/** A body of `bytes` sent chunked: a stream of 64 KiB pieces, no content-length. */
function chunked(bytes: number): ReadableStream<Uint8Array> {
  let sent = 0
  return new ReadableStream({
    pull(controller) {
      const n = Math.min(64 * 1024, bytes - sent)
      if (n <= 0) return controller.close()
      sent += n
      controller.enqueue(new Uint8Array(n).fill(0x61))
    },
  })
}

/** `bytes` of a JSON body that carries the secret (a content-length is sent). */
function padded(path: Path, bytes: number): string {
  const body = JSON.stringify(valid(path, `${SECRET} `))
  return body.replace(`${SECRET} `, `${SECRET} ${'x'.repeat(Math.max(0, bytes - body.length))}`)
}

interface Case {
  name: string
  status: number
  body: (path: Path) => string | Uint8Array | ReadableStream<Uint8Array> | object
  headers?: (key: string) => Record<string, string>
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` })
const CASES: Case[] = [
  { name: 'malformed JSON', status: 400, body: (p) => JSON.stringify(valid(p)).slice(0, -5) },
  { name: 'an empty body', status: 400, body: () => '' },
  { name: 'null', status: 400, body: () => 'null' },
  { name: 'a JSON array', status: 400, body: (p) => [valid(p)] },
  { name: 'an empty model', status: 400, body: (p) => ({ ...valid(p), model: '' }) },
  { name: 'a number for user', status: 400, body: (p) => ({ ...valid(p), user: 42 }) },
  { name: 'a string for max_tokens', status: 400, body: (p) => ({ ...valid(p), max_tokens: '10' }) },
  { name: 'a string for temperature', status: 400, body: (p) => ({ ...valid(p), temperature: SECRET }) },
  { name: 'an unknown field', status: 400, body: (p) => ({ ...valid(p), frobnicate: SECRET }) },
  { name: 'invalid UTF-8', status: 400, body: (p) => Buffer.concat([Buffer.from(JSON.stringify(valid(p)).slice(0, -2)), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]) },
  { name: 'deeply nested JSON', status: 400, body: (p) => JSON.stringify(valid(p)).replace('}', `, "x": ${'['.repeat(50_000)}${']'.repeat(50_000)}}`) },
  { name: 'an unknown model', status: 404, body: (p) => ({ ...valid(p), model: 'no-such-model' }) },
  { name: 'text/plain', status: 415, body: (p) => valid(p), headers: (key) => ({ ...bearer(key), 'content-type': 'text/plain' }) },
  { name: 'no key', status: 401, body: (p) => valid(p), headers: () => ({}) },
  { name: 'an unknown key', status: 401, body: (p) => valid(p), headers: () => bearer(`zl-${'Q'.repeat(32)}`) },
  { name: 'two different keys', status: 401, body: (p) => valid(p), headers: (key) => ({ ...bearer(key), 'x-api-key': `zl-${'Q'.repeat(32)}` }) },
  { name: 'no key, 1.3 MB body', status: 401, body: (p) => padded(p, 1_300_000), headers: () => ({}) },
  { name: 'no key, 4 MB chunked', status: 401, body: () => chunked(4_000_000), headers: () => ({}) },
  { name: '1.1 MB chunked', status: 413, body: () => chunked(1_100_000) },
  { name: '1.3 MB chunked', status: 413, body: () => chunked(1_300_000) },
  { name: '4 MB chunked', status: 413, body: () => chunked(4_000_000) },
  { name: '1.3 MB with a content-length', status: 413, body: (p) => padded(p, 1_300_000) },
  { name: '4 MB with a content-length', status: 413, body: (p) => padded(p, 4_000_000) },
  { name: 'just under the limit', status: 400, body: (p) => ({ ...JSON.parse(padded(p, MAX_BODY_BYTES - 100)), frobnicate: 1 }) },
  { name: 'a valid request', status: 200, body: (p) => valid(p, 'Hello') },
]

interface Outcome {
  label: string
  status?: number
  text?: string
  error?: string
}

async function send(edgeUrl: string, path: Path, c: Case): Promise<Outcome> {
  const label = `${c.name} on ${path}`
  const body = c.body(path)
  const raw = typeof body === 'string' || body instanceof Uint8Array || body instanceof ReadableStream ? body : JSON.stringify(body)
  try {
    const res = await fetch(`${edgeUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(c.headers ? c.headers(stack.devApiKey) : bearer(stack.devApiKey)) },
      body: raw,
      ...(raw instanceof ReadableStream ? { duplex: 'half' } : {}),
    } as RequestInit)
    return { label, status: res.status, text: await res.text() }
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause
    return { label, error: cause?.code ?? cause?.message ?? String(e) }
  }
}

function expectDialectError(o: Outcome, path: Path): void {
  const json = JSON.parse(o.text!) as Record<string, any>
  if (path === MESSAGES) {
    expect(json, o.label).toEqual({ type: 'error', error: { type: expect.any(String), message: expect.any(String) } })
  } else {
    expect(json, o.label).toEqual({ error: { message: expect.any(String), type: expect.any(String), param: expect.toSatisfy((p: unknown) => p === null || typeof p === 'string'), code: expect.any(String) } })
  }
}

describe.each([
  ['the Workers edge (Miniflare, as npm start runs it)', () => stack.edgeUrl],
  ['the Node entry', () => nodeEdgeUrl],
])('hostile input through %s', (_name, edgeUrl) => {
  it(`answers each of ${ROUNDS} rounds of every case on every route at concurrency ${CONCURRENCY}, with no connection reset`, async () => {
    const jobs: Array<{ path: Path; c: Case }> = []
    for (let round = 0; round < ROUNDS; round++) for (const c of CASES) for (const path of [CHAT, COMPLETIONS, MESSAGES] as const) jobs.push({ path, c })
    const outcomes: Array<{ path: Path; c: Case; o: Outcome }> = []
    let next = 0
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < jobs.length) {
          const job = jobs[next++]!
          outcomes.push({ ...job, o: await send(edgeUrl(), job.path, job.c) })
        }
      }),
    )
    const resets = outcomes.filter(({ o }) => o.error !== undefined).map(({ o }) => `${o.label}: ${o.error}`)
    expect(resets, `${resets.length} of ${outcomes.length} requests got no answer`).toEqual([])
    for (const { path, c, o } of outcomes) {
      expect(o.status, `${o.label}: ${o.text?.slice(0, 200)}`).toBe(c.status)
      expect(o.text, o.label).not.toContain(SECRET)
      if (c.status !== 200) expectDialectError(o, path)
    }
  })
})
