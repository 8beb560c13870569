/**
 * Cancellation end to end on the real node: a client that goes away frees its sequence within
 * two engine steps (zl_abort_free_steps, fed by EngineObserver.onAbortFreed) and leaves nothing
 * running or waiting, in every dialect, before its first token, while queued, and under 200
 * random aborts; the node then still answers correctly.
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import type { ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pollUntil, startGpuNode, type GpuNodeProcess, type Metrics } from './gpu-node-process.ts'
import { longPrompt } from './prompts.ts'
import { CHAT, COMPLETIONS, MESSAGES, post, sseFrames } from './sse-client.ts'
import { seededRandom } from '../../shared/test/support/seeded-random.ts'

/** The default batch: the dialect aborts and the 200-abort storm. */
let node: GpuNodeProcess
/**
 * One sequence at a time with 2-token prefill chunks: a second request is reliably queued, and
 * a long prompt is reliably still prefilling (no first token) when its client leaves. Keep-alive
 * comments every 50 ms, so a queued stream shows them.
 */
let serial: GpuNodeProcess

beforeAll(async () => {
  ;[node, serial] = await Promise.all([startGpuNode(), startGpuNode({ env: { MAX_BATCH: '1', PREFILL_CHUNK: '2', KEEPALIVE_MS: '50' } })])
})

afterAll(async () => {
  await Promise.all([node?.stop(), serial?.stop()])
})

const ABORT_FREE = 'zl_abort_free_steps'
/** Long enough (seconds on the tiny model) that only an abort ends it during the test. */
const LONG = { max_tokens: 900, ignore_eos: true }

interface AbortCounts {
  freed: number
  freedWithinTwoSteps: number
  clientAborted: number
  success: number
  ttft: number
}

function counts(m: Metrics): AbortCounts {
  return {
    freed: m.count(ABORT_FREE),
    freedWithinTwoSteps: m.bucket(ABORT_FREE, '2'),
    clientAborted: m.value('zl_request_failure_total', { reason: 'client_aborted' }),
    success: m.value('zl_request_success_total'),
    ttft: m.count('zl_time_to_first_token_seconds'),
  }
}

/** Waits until nothing runs or waits; returns that scrape. */
function waitIdle(n: GpuNodeProcess, what = 'zero running and waiting requests'): Promise<Metrics> {
  return pollUntil(
    () => n.metrics(),
    (m) => m.value('zl_num_requests_running') === 0 && m.value('zl_num_requests_waiting') === 0,
    what,
  )
}

/** Waits until the aborted sequence's release is observed, then checks the whole node state. */
async function expectFreedWithinTwoSteps(n: GpuNodeProcess, before: AbortCounts, aborted = 1): Promise<AbortCounts> {
  const m = await pollUntil(
    () => n.metrics(),
    (s) => s.count(ABORT_FREE) >= before.freed + aborted && s.value('zl_num_requests_running') === 0,
    `${aborted} more ${ABORT_FREE} observation(s) and zero running`,
  )
  expect(m.has(`${ABORT_FREE}_count`), `${ABORT_FREE} is exported`).toBe(true)
  const after = counts(m)
  expect(after.freed - before.freed).toBe(aborted)
  // Every observation so far is ≤ 2 steps: the le="2" bucket holds them all.
  expect(after.freedWithinTwoSteps).toBe(after.freed)
  expect(after.clientAborted - before.clientAborted).toBe(aborted)
  expect(after.success).toBe(before.success)
  expect(m.value('zl_num_requests_waiting')).toBe(0)
  return after
}

describe('a client that leaves mid-stream', () => {
  it('OpenAI chat (SDK stream.controller.abort()): the sequence is freed within two steps', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 0 })
    const before = counts(await waitIdle(node))
    const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Talk forever' }], stream: true, ...LONG } as ChatCompletionCreateParamsStreaming)
    let contentChunks = 0
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) contentChunks++
      if (contentChunks === 3) {
        stream.controller.abort()
        break
      }
    }
    expect(contentChunks).toBe(3)
    await expectFreedWithinTwoSteps(node, before)
  })

  it('Anthropic messages (SDK stream.controller.abort()): the sequence is freed within two steps', async () => {
    const client = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 0 })
    const before = counts(await waitIdle(node))
    const stream = await client.messages.create({ model: 'tiny', messages: [{ role: 'user', content: 'Talk forever' }], stream: true, ...LONG } as Anthropic.MessageCreateParamsStreaming)
    let deltas = 0
    for await (const event of stream) {
      if (event.type === 'content_block_delta') deltas++
      if (deltas === 3) {
        stream.controller.abort()
        break
      }
    }
    expect(deltas).toBe(3)
    await expectFreedWithinTwoSteps(node, before)
  })

  it('OpenAI completions (raw fetch AbortController): the sequence is freed within two steps', async () => {
    const before = counts(await waitIdle(node))
    const ac = new AbortController()
    const res = await post(node.url, COMPLETIONS, { model: 'tiny', prompt: 'Talk forever', stream: true, ...LONG }, { signal: ac.signal })
    expect(res.status).toBe(200)
    let frames = 0
    await expect(
      (async () => {
        for await (const f of sseFrames(res)) {
          if (!f.comment && ++frames === 3) ac.abort()
        }
      })(),
    ).rejects.toThrow(/abort/i)
    await expectFreedWithinTwoSteps(node, before)
  })
})

describe('a client that leaves before its first token', () => {
  it('frees a sequence that is still prefilling, and no token is ever produced for it', async () => {
    const before = counts(await waitIdle(serial))
    // ~1000 prompt tokens in 2-token chunks: hundreds of steps before a first token could exist.
    const ac = new AbortController()
    const res = await post(serial.url, COMPLETIONS, { model: 'tiny', prompt: longPrompt().slice(0, 1000), max_tokens: 8, stream: true }, { signal: ac.signal })
    expect(res.status).toBe(200)
    ac.abort()
    const after = await expectFreedWithinTwoSteps(serial, before)
    expect(after.ttft, 'no first token was produced').toBe(before.ttft)
  })

  it('frees a queued request without disturbing the running one', async () => {
    const before = counts(await waitIdle(serial))
    const running = await post(serial.url, CHAT, { model: 'tiny', messages: [{ role: 'user', content: 'first' }], max_tokens: 300, ignore_eos: true, stream: true, stream_options: { include_usage: true } })
    expect(running.status).toBe(200)
    await pollUntil(() => serial.metrics(), (m) => m.value('zl_num_requests_running') === 1, 'the first request to run')

    const ac = new AbortController()
    const queued = await post(serial.url, MESSAGES, { model: 'tiny', messages: [{ role: 'user', content: 'second' }], max_tokens: 50, stream: true }, { signal: ac.signal })
    expect(queued.status).toBe(200)
    await pollUntil(() => serial.metrics(), (m) => m.value('zl_num_requests_waiting') === 1, 'the second request to be queued')
    // While it waits for its first token the stream carries `: keep-alive` comments, nothing else
    // after the opening frames.
    const seen: string[] = []
    for await (const f of sseFrames(queued)) {
      if (f.comment) break
      seen.push(f.event ?? '')
    }
    expect(seen).toEqual(['message_start', 'content_block_start', 'ping'])
    ac.abort()
    const m = await pollUntil(() => serial.metrics(), (s) => s.value('zl_num_requests_waiting') === 0, 'the queued request to leave the queue')
    // It left the queue because it was aborted, not because it ran: the first is still running.
    expect(m.value('zl_num_requests_running')).toBe(1)
    expect(counts(m).clientAborted - before.clientAborted).toBe(1)
    // A queued request holds no KV: nothing to free, so no abort-free observation.
    expect(counts(m).freed).toBe(before.freed)

    // The running stream is unaffected and completes normally.
    const datas: string[] = []
    for await (const f of sseFrames(running)) if (!f.comment) datas.push(f.data)
    expect(datas.at(-1)).toBe('[DONE]')
    const chunks = datas.slice(0, -1).map((d) => JSON.parse(d) as OpenAI.ChatCompletionChunk)
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0]!.finish_reason).toBe('length')
    expect(chunks.at(-1)!.usage!.completion_tokens).toBe(300)
    await waitIdle(serial)
  })
})

describe('200 random aborts', () => {
  it('leave zero running and waiting sequences, every free within two steps, and a node that still answers correctly', async () => {
    const probe = { model: 'tiny', prompt: 'The quick brown fox', max_tokens: 24, temperature: 0 }
    const baseline = ((await (await post(node.url, COMPLETIONS, probe)).json()) as OpenAI.Completion).choices[0]!.text
    const before = counts(await waitIdle(node))

    const rand = seededRandom(0x5eed) // seeded, so a failing storm can be replayed
    const outcomes = await runBounded(200, 32, (i) => randomRequest(node.url, i, rand))
    const completed = outcomes.filter((o) => o === 'completed').length
    const aborted = outcomes.filter((o) => o === 'aborted').length
    expect(completed + aborted).toBe(200)
    expect(aborted).toBeGreaterThan(80)
    expect(completed).toBeGreaterThan(40)

    const m = await waitIdle(node, 'the node to settle after the storm')
    const after = counts(m)
    expect(m.value('zl_num_requests_running')).toBe(0)
    expect(m.value('zl_num_requests_waiting')).toBe(0)
    expect(m.value('zl_kv_cache_usage_ratio')).toBe(0)
    expect(after.freed).toBeGreaterThan(before.freed)
    expect(after.freedWithinTwoSteps, 'every abort freed within two steps').toBe(after.freed)
    // Every stream the client read to its end counted as a success on the node.
    expect(after.success - before.success).toBeGreaterThanOrEqual(completed)
    expect(after.success - before.success + after.clientAborted - before.clientAborted).toBeLessThanOrEqual(200)

    const again = ((await (await post(node.url, COMPLETIONS, probe)).json()) as OpenAI.Completion).choices[0]!.text
    expect(again).toBe(baseline)
  })
})

type Outcome = 'completed' | 'aborted'

/**
 * One random streaming request in a random dialect, with a random budget; about 60% are aborted:
 * some before the response arrives, the rest after 0–20 frames. Streams read to their end must
 * end the dialect's way.
 */
async function randomRequest(url: string, i: number, rand: () => number): Promise<Outcome> {
  const dialect = [CHAT, COMPLETIONS, MESSAGES][Math.floor(rand() * 3)]!
  const maxTokens = 1 + Math.floor(rand() * 48)
  const common = { model: 'tiny', max_tokens: maxTokens, stream: true, ignore_eos: rand() < 0.5, seed: i }
  const body =
    dialect === COMPLETIONS ? { ...common, prompt: `request ${i}: ` } : { ...common, messages: [{ role: 'user', content: `request ${i}` }] }
  const roll = rand()
  const abortAfterFrames = roll < 0.4 ? Infinity : roll < 0.5 ? -1 : Math.floor(rand() * 21)
  const ac = new AbortController()
  const pending = post(url, dialect, body, { signal: ac.signal })
  if (abortAfterFrames === -1) {
    ac.abort()
    await pending.catch(() => {})
    return 'aborted'
  }
  const res = await pending
  if (res.status !== 200) throw new Error(`request ${i}: status ${res.status}: ${await res.text()}`)
  const datas: Array<{ event?: string; data: string }> = []
  let frames = 0
  try {
    for await (const f of sseFrames(res)) {
      if (f.comment) continue
      datas.push(f)
      if (frames++ === abortAfterFrames) {
        ac.abort()
        break
      }
    }
  } catch (e) {
    if (!ac.signal.aborted) throw e
  }
  if (ac.signal.aborted) return 'aborted'
  const last = datas.at(-1)
  if (dialect === MESSAGES) expect(last?.event, `request ${i} ends with message_stop`).toBe('message_stop')
  else expect(last?.data, `request ${i} ends with [DONE]`).toBe('[DONE]')
  return 'completed'
}

/** Runs `count` tasks with at most `limit` in flight; results in task order. */
async function runBounded<T>(count: number, limit: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const results = new Array<T>(count)
  let next = 0
  const worker = async () => {
    while (next < count) {
      const i = next++
      results[i] = await task(i)
    }
  }
  await Promise.all(Array.from({ length: limit }, worker))
  return results
}

