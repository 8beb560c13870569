/**
 * Overload and drain on the real node (MAX_BATCH=1, MAX_QUEUE=2): a full node refuses at once
 * with 503 (OpenAI) / 529 (Anthropic) and a numeric `retry-after-ms` that both SDKs honour;
 * SIGTERM stops admitting (readyz 503, new requests refused) while the admitted streams,
 * running and queued, finish normally, and then the process exits 0.
 */
import { connect } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pollUntil, startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'
import { CHAT, COMPLETIONS, MESSAGES, post, sseFrames, type SseFrame } from './sse-client.ts'

let node: GpuNodeProcess

beforeAll(async () => {
  node = await startGpuNode({ env: { MAX_BATCH: '1', MAX_QUEUE: '2' } })
})

afterAll(async () => {
  await node?.stop()
})

/** Runs for seconds on the tiny model unless aborted. */
const LONG = { max_tokens: 900, ignore_eos: true }
/** "Answered immediately": no engine step is involved in refusing, only a queue check. */
const IMMEDIATE_MS = 500

/** An open stream the test holds: its frames so far, and a way to end it from the client side. */
interface HeldStream {
  res: Response
  abort(): void
  /** Reads until `n` non-comment frames have arrived in total. */
  readFrames(n: number): Promise<void>
  /** Reads to the end; returns every non-comment frame. */
  readAll(): Promise<SseFrame[]>
}

async function openStream(path: string, body: object): Promise<HeldStream> {
  const ac = new AbortController()
  const res = await post(node.url, path, { model: 'tiny', stream: true, ...body }, { signal: ac.signal })
  expect(res.status).toBe(200)
  const frames: SseFrame[] = []
  const it = sseFrames(res)[Symbol.asyncIterator]()
  const next = async (): Promise<boolean> => {
    const r = await it.next()
    if (r.done) return false
    if (!r.value.comment) frames.push(r.value)
    return true
  }
  return {
    res,
    abort: () => ac.abort(),
    readFrames: async (n) => {
      while (frames.length < n) if (!(await next())) throw new Error(`stream ended after ${frames.length} frames`)
    },
    readAll: async () => {
      while (await next());
      return frames
    },
  }
}

const chatBody = (content: string, extra: object = {}) => ({ messages: [{ role: 'user', content }], ...extra })

/** One running (long) and two queued requests: the node is full. */
async function fillNode(queued: object): Promise<HeldStream[]> {
  await waitIdle()
  const running = await openStream(CHAT, chatBody('fill running', LONG))
  await pollUntil(() => node.metrics(), (m) => m.value('zl_num_requests_running') === 1, 'the first request to run')
  // Enough tokens in the node's throughput window that its retry-after estimate is short.
  await running.readFrames(40)
  const a = await openStream(CHAT, chatBody('fill queued a', queued))
  const b = await openStream(MESSAGES, chatBody('fill queued b', queued))
  await pollUntil(() => node.metrics(), (m) => m.value('zl_num_requests_waiting') === 2, 'two queued requests')
  return [running, a, b]
}

function waitIdle() {
  return pollUntil(
    () => node.metrics(),
    (m) => m.value('zl_num_requests_running') === 0 && m.value('zl_num_requests_waiting') === 0,
    'an idle node',
  )
}

async function release(streams: HeldStream[]): Promise<void> {
  for (const s of streams) s.abort()
  for (const s of streams) await s.readAll().catch(() => {})
  await waitIdle()
}

interface Attempt {
  startMs: number
  endMs: number
  status: number
  retryAfterMs: number | undefined
}

/** A fetch for the SDK's `fetch` option that records each attempt (the SDK itself is unmodified). */
function recordingFetch(attempts: Attempt[], onRefused: () => void): typeof fetch {
  return async (input, init) => {
    const startMs = performance.now()
    const res = await fetch(input, init)
    const header = res.headers.get('retry-after-ms')
    attempts.push({ startMs, endMs: performance.now(), status: res.status, retryAfterMs: header === null ? undefined : Number(header) })
    if (res.status >= 500) onRefused()
    return res
  }
}

describe('a full node', () => {
  it('refuses at once: 503 in the OpenAI dialects, 529 in Anthropic, with a numeric retry-after-ms', async () => {
    const held = await fillNode(LONG)
    try {
      for (const [path, body, status] of [
        [CHAT, chatBody('one more'), 503],
        [COMPLETIONS, { prompt: 'one more' }, 503],
        [MESSAGES, chatBody('one more', { max_tokens: 8 }), 529],
      ] as const) {
        const t0 = performance.now()
        const res = await post(node.url, path, { model: 'tiny', max_tokens: 8, ...body })
        const elapsedMs = performance.now() - t0
        const json = (await res.json()) as Record<string, Record<string, unknown>>
        expect(res.status, path).toBe(status)
        expect(elapsedMs, `${path} answered in ${elapsedMs} ms`).toBeLessThan(IMMEDIATE_MS)
        const retryAfterMs = Number(res.headers.get('retry-after-ms'))
        expect(Number.isFinite(retryAfterMs) && retryAfterMs > 0, `retry-after-ms ${res.headers.get('retry-after-ms')}`).toBe(true)
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
        expect(res.headers.get('x-should-retry')).toBe('true')
        if (path === MESSAGES) expect(json).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } })
        else expect(json.error).toMatchObject({ type: 'server_error', code: 'overloaded' })
      }

      // Through the SDKs, without retries: their 5xx classes, still immediate.
      const openai = new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 0 })
      const anthropic = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 0 })
      const t0 = performance.now()
      const e1 = await openai.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }).catch((e: unknown) => e)
      const e2 = await anthropic.messages.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }).catch((e: unknown) => e)
      expect(performance.now() - t0).toBeLessThan(2 * IMMEDIATE_MS)
      expect(e1).toBeInstanceOf(OpenAI.InternalServerError)
      expect((e1 as InstanceType<typeof OpenAI.APIError>).status).toBe(503)
      expect(e2).toBeInstanceOf(Anthropic.OverloadedError)
      expect((e2 as InstanceType<typeof Anthropic.APIError>).status).toBe(529)

      // The refused requests left the admitted ones alone.
      const m = await node.metrics()
      expect(m.value('zl_num_requests_running')).toBe(1)
      expect(m.value('zl_num_requests_waiting')).toBe(2)
    } finally {
      await release(held)
    }
  })

  it.each([
    ['openai', 503],
    ['anthropic', 529],
  ] as const)('the %s SDK waits retry-after-ms, retries once, and succeeds once the queue drains', async (sdk, refusedStatus) => {
    const held = await fillNode({ max_tokens: 8 })
    try {
      const attempts: Attempt[] = []
      // The queue drains as soon as the long running request leaves: a queued one takes its place.
      const fetchFn = recordingFetch(attempts, () => held[0]!.abort())
      const params = { model: 'tiny', messages: [{ role: 'user' as const, content: 'retry me' }], max_tokens: 4 }
      if (sdk === 'openai') {
        const client = new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 1, fetch: fetchFn })
        const res = await client.chat.completions.create(params)
        expect(res.choices[0]!.finish_reason).toMatch(/^(stop|length)$/)
      } else {
        const client = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 1, fetch: fetchFn })
        const res = await client.messages.create(params)
        expect(res.stop_reason).toMatch(/^(end_turn|max_tokens)$/)
      }

      expect(attempts.map((a) => a.status)).toEqual([refusedStatus, 200])
      const [refused, retried] = attempts as [Attempt, Attempt]
      expect(refused.endMs - refused.startMs).toBeLessThan(IMMEDIATE_MS)
      const retryAfterMs = refused.retryAfterMs!
      expect(retryAfterMs).toBeGreaterThan(0)
      // Bounded: the estimate is short here (queued work is 16 tokens at the measured rate).
      expect(retryAfterMs).toBeLessThan(10_000)
      const waitedMs = retried.startMs - refused.endMs
      // Timers may fire up to ~1 ms early by rounding; the SDK sleeps exactly retry-after-ms.
      expect(waitedMs, `waited ${waitedMs} ms for retry-after-ms ${retryAfterMs}`).toBeGreaterThanOrEqual(retryAfterMs - 2)
      expect(waitedMs).toBeLessThan(retryAfterMs + 1000)
    } finally {
      await release(held)
    }
  })
})

describe('SIGTERM', () => {
  // Clients keep spare connections that have sent nothing yet (undici does after an abort): a drain
  // must close them rather than wait for its force timeout.
  it('exits promptly when a client holds a connection it has sent nothing on', async () => {
    const probe = await startGpuNode()
    const socket = connect(Number(new URL(probe.url).port), '127.0.0.1')
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject))
    socket.on('error', () => {})
    try {
      const t0 = performance.now()
      const status = await probe.stop()
      expect(status.code).toBe(0)
      expect(performance.now() - t0).toBeLessThan(2000)
    } finally {
      socket.destroy()
      await probe.kill()
    }
  })

  it('drains: readyz 503 and new requests refused, the running and queued streams finish, then exit 0', async () => {
    await waitIdle()
    const running = await openStream(CHAT, chatBody('drain me', { max_tokens: 600, ignore_eos: true, stream_options: { include_usage: true } }))
    await pollUntil(() => node.metrics(), (m) => m.value('zl_num_requests_running') === 1, 'the stream to run')
    const queued = await openStream(MESSAGES, chatBody('me too', { max_tokens: 20, ignore_eos: true }))
    await pollUntil(() => node.metrics(), (m) => m.value('zl_num_requests_waiting') === 1, 'the second stream to queue')
    await running.readFrames(3)

    node.child.kill('SIGTERM')
    await node.waitForLog((l) => l.msg === 'draining')

    const ready = await fetch(`${node.url}/readyz`)
    expect(ready.status).toBe(503)
    expect(await ready.json()).toEqual({ status: 'draining' })
    expect((await fetch(`${node.url}/healthz`)).status).toBe(200)
    for (const [path, body, status, type] of [
      [CHAT, chatBody('new'), 503, 'server_error'],
      [MESSAGES, chatBody('new'), 529, 'overloaded_error'],
    ] as const) {
      const res = await post(node.url, path, { model: 'tiny', max_tokens: 4, ...body })
      expect(res.status).toBe(status)
      expect(Number(res.headers.get('retry-after-ms'))).toBeGreaterThan(0)
      const json = (await res.json()) as { error: { type: string } }
      expect(json.error.type).toBe(type)
    }
    const exitedEarly = await Promise.race([node.exited.then(() => true), Promise.resolve(false)])
    expect(exitedEarly, 'the node waits for its streams').toBe(false)

    const chat = await running.readAll()
    expect(chat.at(-1)!.data).toBe('[DONE]')
    const chunks = chat.slice(0, -1).map((f) => JSON.parse(f.data) as OpenAI.ChatCompletionChunk)
    expect(chunks.some((c) => 'error' in c)).toBe(false)
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0]!.finish_reason).toBe('length')
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(600)

    const messages = await queued.readAll()
    expect(messages.map((f) => f.event).slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop'])
    expect(JSON.parse(messages.at(-2)!.data)).toMatchObject({ delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 20 } })

    const status = await pollUntil(
      async () => Promise.race([node.exited, Promise.resolve(undefined)]),
      (s) => s !== undefined,
      'the node to exit after its streams',
      15_000,
    )
    expect(status).toEqual({ code: 0, signal: null })
    expect(node.logs.some((l) => l.msg === 'drained')).toBe(true)
  })
})
