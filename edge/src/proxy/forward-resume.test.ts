/**
 * Where forward sends a continuation: the caller's `resumeNodes` is asked with the failed node
 * excluded, and its first node gets the continuation — not the request's own second-ranked node
 * (the ranking the stream was routed on may be minutes old). A control: without `resumeNodes`,
 * the request's ranking less the failed node decides, as before. Fake upstreams built from web
 * streams (the Workers path), no network.
 */
import { describe, expect, it } from 'vitest'
import { getDialect } from '../../../shared/src/dialects/index.ts'
import { RESUME_HEADERS, resumeIdLine } from '../../../shared/src/resume-wire.ts'
import type { RankedNode } from '../routing/pick-node.ts'
import { forward } from './forward.ts'
import type { ForwardDeps } from './forward-request.ts'
import type { UpstreamFetch } from './upstream-fetch.ts'

const enc = new TextEncoder()
const node = (id: string): RankedNode => ({ id, url: `http://${id}.invalid`, region: id, lat: 0, lon: 0, maxBatch: 8, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 0, draining: false, source: 'static', distanceKm: 0, rttMs: 0, queueWaitMs: 0, costMs: 0 })
const frame = (n: number, tokens: number[], text: string) => `${resumeIdLine(n, tokens)}data: {"choices":[{"delta":{"content":"${text}"}}]}\n\n`
const sse = (body: ReadableStream<Uint8Array>) => new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } })

/** Node `first` sends two frames and breaks; any other node answers the continuation and ends with [DONE]. */
function fleet() {
  const asked: Array<{ host: string; resume: string | undefined; resumable: string | undefined }> = []
  const upstream: UpstreamFetch = async (url, init) => {
    const host = new URL(url).hostname.split('.')[0]!
    const headers = init.headers as Record<string, string>
    asked.push({ host, resume: headers[RESUME_HEADERS.resume], resumable: headers[RESUME_HEADERS.resumable] })
    if (host === 'first') {
      // Errored on the pull after its frames were read (an error discards chunks still queued).
      let pulls = 0
      return sse(
        new ReadableStream({
          pull(c) {
            if (pulls++ === 0) c.enqueue(enc.encode(frame(1, [5], 'a') + frame(2, [6], 'b')))
            else c.error(new Error('reset'))
          },
        }, { highWaterMark: 0 }),
      )
    }
    return sse(
      new ReadableStream({
        start(c) {
          c.enqueue(enc.encode(`${frame(3, [7], host)}data: [DONE]\n\n`))
          c.close()
        },
      }),
    )
  }
  return { asked, upstream }
}

function deps(upstream: UpstreamFetch, extra: Partial<ForwardDeps> = {}): ForwardDeps {
  return { upstream, secret: 'zl-test-edge-secret-0123456789', connectTimeoutMs: 1000, requestTimeoutMs: 5000, markDown: () => {}, now: Date.now, ...extra }
}

const request = { path: '/v1/chat/completions', body: enc.encode('{}'), stream: true, resumable: true, codec: getDialect('openai-chat'), requestId: 'req-1', traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01', tenant: 't', keyId: 'k', priority: 0, edge: 'test', startedAtMs: Date.now(), seed: 42 }

describe('forward: where a continuation goes', () => {
  it('asks resumeNodes without the failed node, sends the continuation to its first node, and reports it', async () => {
    const { asked, upstream } = fleet()
    const excluded: string[][] = []
    const resumedOn: string[] = []
    const result = await forward([node('first'), node('second')], request, deps(upstream, {
      resumeNodes: async (exclude) => {
        excluded.push([...exclude])
        return [node('first'), node('fresh'), node('second')]
      },
      onResumedOn: (n) => resumedOn.push(n.id),
    }))
    const text = await result.respond().text()
    expect(await result.finished).toMatchObject({ kind: 'complete', resumes: 1 })
    expect(excluded).toEqual([['first']])
    expect(asked.map((a) => a.host)).toEqual(['first', 'fresh'])
    expect(asked[1]!.resume).toBeDefined()
    expect(resumedOn).toEqual(['fresh'])
    expect(text).toBe(frame(1, [5], 'a') + frame(2, [6], 'b') + frame(3, [7], 'fresh') + 'data: [DONE]\n\n')
  })

  it('control: without resumeNodes the request’s own ranking less the failed node decides', async () => {
    const { asked, upstream } = fleet()
    const result = await forward([node('first'), node('second')], request, deps(upstream))
    await result.respond().text()
    expect(asked.map((a) => a.host)).toEqual(['first', 'second'])
    expect(asked[0]!.resumable).toBe('1')
  })

  it('MAX_RESUMES=0: the plain pipe, and the node is not asked for id lines', async () => {
    const { asked, upstream } = fleet()
    const result = await forward([node('first'), node('second')], request, deps(upstream, { maxResumes: 0 }))
    expect(await result.respond().text()).toContain('"error"')
    expect(asked).toEqual([{ host: 'first', resume: undefined, resumable: undefined }])
  })
})
