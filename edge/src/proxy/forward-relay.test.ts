/**
 * `relayedStreams` (the Node entry's server takes every forwarded event stream's relay): such a
 * Response is made without a web body, so the pass-through never builds its ReadableStream; the
 * relay alone carries the bytes. Controls: without the flag (app.request, Workers) the body is the
 * web stream and carries the same bytes; a non-event-stream answer to a streaming request (which
 * the server writes from the body, not the relay) keeps its body with the flag on.
 */
import { describe, expect, it } from 'vitest'
import { getDialect } from '../../../shared/src/dialects/index.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import { forward } from './forward.ts'
import type { ForwardDeps } from './forward-request.ts'
import type { UpstreamFetch, UpstreamResponse } from './upstream-fetch.ts'
import { forwardedFacts, takeRelay } from './forwarded-response.ts'
import type { ChunkSink, RelayOut } from './pass-through.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()
const node: RankedNode = { id: 'n1', url: 'http://n1.invalid', region: 'r1', lat: 0, lon: 0, maxBatch: 8, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 0, draining: false, source: 'static', distanceKm: 0, rttMs: 0, queueWaitMs: 0, costMs: 0 }
const STREAM = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'

/** A node answer whose body is pushed (as the Node entry's upstreams push it); `webReads` counts reads of `body`. */
function pushedAnswer(contentType: string, text: string): { res: UpstreamResponse; webReads: () => number } {
  let reads = 0
  const headers = new Headers({ 'content-type': contentType })
  const res: UpstreamResponse = {
    status: 200,
    headers,
    arrayBuffer: async () => enc.encode(text).buffer as ArrayBuffer,
    get body() {
      reads++
      return new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(enc.encode(text))
          c.close()
        },
      })
    },
    pushTo(sink: ChunkSink) {
      queueMicrotask(() => {
        sink.chunk(enc.encode(text))
        sink.end()
      })
      return { resume() {}, cancel() {} }
    },
  }
  return { res, webReads: () => reads }
}

function deps(upstream: UpstreamFetch, extra: Partial<ForwardDeps> = {}): ForwardDeps {
  return { upstream, secret: 'zl-test-edge-secret-0123456789', connectTimeoutMs: 1000, requestTimeoutMs: 5000, markDown: () => {}, now: Date.now, ...extra }
}

const request = { path: '/v1/chat/completions', body: enc.encode('{}'), stream: true, resumable: true, codec: getDialect('openai-chat'), requestId: 'req-1', traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01', tenant: 't', keyId: 'k', priority: 0, edge: 'test', startedAtMs: Date.now(), seed: 42 }

/** Runs a relay into a stand-in of the server's response and returns what it wrote. */
async function relayed(response: Response): Promise<string> {
  const relay = takeRelay(response)
  expect(relay).toBeDefined()
  let text = ''
  const done = new Promise<void>((resolve) => {
    const out: RelayOut = {
      write: (chunk) => ((text += dec.decode(chunk)), true),
      end: () => resolve(),
      destroy: () => resolve(),
      once: () => out,
      prependOnceListener: () => out,
    }
    relay!(out)
  })
  await done
  return text
}

describe('forward: relayed event streams are made without a web body', () => {
  for (const maxResumes of [2, 0]) {
    it(`relayedStreams: the Response has no body, the relay carries the stream (resumes ${maxResumes ? 'on' : 'off'})`, async () => {
      const answer = pushedAnswer('text/event-stream', STREAM)
      const result = await forward([node], request, deps(async () => answer.res, { relayedStreams: true, maxResumes }))
      const response = result.respond()
      expect(response.body).toBeNull()
      expect(forwardedFacts(response)?.sse).toBe(true)
      expect(await relayed(response)).toContain('data: [DONE]')
      expect(answer.webReads()).toBe(0)
      expect((await result.finished).kind).toBe('complete')
    })
  }

  it('control: without the flag the body is the web stream, with the same bytes', async () => {
    const answer = pushedAnswer('text/event-stream', STREAM)
    const result = await forward([node], request, deps(async () => answer.res))
    const response = result.respond()
    expect(response.body).toBeInstanceOf(ReadableStream)
    expect(await response.text()).toContain('data: [DONE]')
  })

  it('a JSON answer to a streaming request keeps its body with the flag on (the server writes it from the body)', async () => {
    const answer = pushedAnswer('application/json', '{"error":{"message":"no"}}')
    const result = await forward([node], request, deps(async () => answer.res, { relayedStreams: true }))
    const response = result.respond()
    expect(forwardedFacts(response)?.sse).toBe(false)
    expect(await response.text()).toBe('{"error":{"message":"no"}}')
  })
})
