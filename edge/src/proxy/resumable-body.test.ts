/**
 * The edge's side of resume without a network: whole-frame forwarding and id-line reading
 * (FrameScanner), and resumableBody's endings — a reset, an end before the final frame, a stall,
 * exhaustion after maxResumes, no node, and a client that leaves mid-resume.
 */
import { describe, expect, it } from 'vitest'
import { resumeIdLine } from '../../../shared/src/resume-wire.ts'
import { getDialect } from '../../../shared/src/dialects/index.ts'
import { FrameScanner, streamEndsOf } from './frame-scanner.ts'
import type { ChunkSink, UpstreamBody } from './pass-through.ts'
import { resumableBody, type ResumeOutcome } from './resumable-body.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()
const frame = (n: number, tokens: number[], text: string) => `${resumeIdLine(n, tokens)}data: {"t":"${text}"}\n\n`

/** A node body the test pushes by hand: chunks, then end or error. */
function scriptedNode() {
  let sink: ChunkSink | undefined
  const pending: Array<(s: ChunkSink) => void> = []
  const run = (f: (s: ChunkSink) => void) => (sink ? f(sink) : pending.push(f))
  const body: UpstreamBody & { cancelled: boolean } = {
    body: null,
    cancelled: false,
    pushTo(s) {
      sink = s
      for (const f of pending.splice(0)) f(s)
      return { resume() {}, cancel: () => void (body.cancelled = true) }
    },
  }
  return { body, send: (text: string) => run((s) => s.chunk(enc.encode(text))), end: () => run((s) => s.end()), fail: () => run((s) => s.error(new Error('reset'))) }
}

function collect(b: UpstreamBody) {
  let text = ''
  let ended: 'end' | 'error' | undefined
  const done = new Promise<void>((resolve) =>
    b.pushTo!({
      chunk: (bytes) => ((text += dec.decode(bytes)), true),
      end: () => ((ended = 'end'), resolve()),
      error: () => ((ended = 'error'), resolve()),
    }),
  )
  return { done, get text() { return text }, get ended() { return ended } }
}

/** OpenAI chat's stream ends, the frames these tests write. */
const OPENAI = streamEndsOf(getDialect('openai-chat'))

describe('FrameScanner', () => {
  it('passes whole frames at once, holds a partial one, and reads id lines and the final frame', () => {
    const s = new FrameScanner(OPENAI)
    const whole = enc.encode(frame(1, [7], 'a') + frame(3, [8, 9], 'b'))
    expect(s.push(whole)).toBe(whole)
    const next = frame(4, [300], 'c') + 'data: [DONE]\n\n'
    expect(dec.decode(s.push(enc.encode(next.slice(0, 10))))).toBe('')
    expect(dec.decode(s.push(enc.encode(next.slice(10, -1))))).toBe(frame(4, [300], 'c'))
    expect(s.finalSeen).toBe(false)
    expect(dec.decode(s.push(enc.encode('\n')))).toBe('data: [DONE]\n\n')
    expect(s.delivered).toEqual([7, 8, 9, 300])
    expect(s.generated).toBe(4)
    expect(s.finalSeen).toBe(true)
    expect(s.flushed).toBe(false)
    s.push(enc.encode(`${resumeIdLine(5, [], true)}data: {}\n\n`))
    expect(s.flushed).toBe(true)
  })

  it('splits a blank line across chunks', () => {
    const s = new FrameScanner(OPENAI)
    expect(dec.decode(s.push(enc.encode('data: x\n')))).toBe('')
    expect(dec.decode(s.push(enc.encode('\ndata: y\n\n')))).toBe('data: x\n\ndata: y\n\n')
  })
})

describe('resumableBody', () => {
  it('continues on another node after a reset, handing over exactly the delivered tokens', async () => {
    const a = scriptedNode()
    const b = scriptedNode()
    const asked: number[][] = []
    const outcomes: ResumeOutcome[] = []
    const body = resumableBody(a.body, { ends: OPENAI, maxResumes: 2, stallMs: 10_000, onResume: (o) => outcomes.push(o), reopen: async (d) => (asked.push([...d]), b.body) })
    const out = collect(body)
    a.send(frame(1, [5], 'x') + frame(2, [6], 'y') + frame(3, [7], 'z').slice(0, 12)) // the third frame is cut
    a.fail()
    await Promise.resolve()
    await new Promise((r) => setImmediate(r))
    b.send(frame(3, [7], 'z') + 'data: [DONE]\n\n')
    b.end()
    await out.done
    expect(asked).toEqual([[5, 6]])
    expect(out.text).toBe(frame(1, [5], 'x') + frame(2, [6], 'y') + frame(3, [7], 'z') + 'data: [DONE]\n\n')
    expect(out.ended).toBe('end')
    expect(body.resumes).toBe(1)
    expect(outcomes).toEqual(['resumed'])
    expect(a.body.cancelled).toBe(true)
  })

  it('treats an end before the final frame as a failure, a silent node as dead after stallMs, and gives up after maxResumes', async () => {
    const nodes = [scriptedNode(), scriptedNode(), scriptedNode()]
    let next = 1
    const outcomes: ResumeOutcome[] = []
    const body = resumableBody(nodes[0].body, { ends: OPENAI, maxResumes: 2, stallMs: 30, onResume: (o) => outcomes.push(o), reopen: async () => nodes[next++].body })
    const out = collect(body)
    nodes[0].send(frame(1, [1], 'a'))
    nodes[0].end() // closed before [DONE]
    // nodes[1] says nothing: the stall bound resumes on nodes[2], which resets.
    await new Promise<void>((r) => { const t = setInterval(() => { if (next === 3) { clearInterval(t); r() } }, 5) })
    nodes[2].fail()
    await out.done
    expect(out.ended).toBe('error')
    expect(outcomes).toEqual(['resumed', 'resumed', 'exhausted'])
    expect(nodes[1].body.cancelled).toBe(true)
  })

  it('ends the stream, not resumes it, when the node breaks after its final frame (a drained node exiting)', async () => {
    const a = scriptedNode()
    let asked = 0
    const body = resumableBody(a.body, { ends: OPENAI, maxResumes: 2, stallMs: 10_000, reopen: async () => (asked++, undefined) })
    const out = collect(body)
    const all = frame(1, [1], 'a') + 'data: [DONE]\n\n'
    a.send(all)
    a.fail()
    await out.done
    expect(out.ended).toBe('end')
    expect(out.text).toBe(all)
    expect(asked).toBe(0)
    expect(body.resumes).toBe(0)
  })

  it('fails when no node takes the continuation', async () => {
    const a = scriptedNode()
    const outcomes: ResumeOutcome[] = []
    const out = collect(resumableBody(a.body, { ends: OPENAI, maxResumes: 2, stallMs: 10_000, onResume: (o) => outcomes.push(o), reopen: async () => undefined }))
    a.fail()
    await out.done
    expect(out.ended).toBe('error')
    expect(outcomes).toEqual(['no_node'])
  })

  it('a whole stream passes unchanged, ended by its own dialect\'s final frame', async () => {
    const a = scriptedNode()
    const out = collect(resumableBody(a.body, { ends: streamEndsOf(getDialect('anthropic-messages')), maxResumes: 2, stallMs: 10_000, reopen: async () => undefined }))
    const all = frame(1, [1], 'a') + 'event: message_stop\ndata: {}\n\n'
    a.send(all)
    a.end()
    await out.done
    expect(out.text).toBe(all)
    expect(out.ended).toBe('end')
  })
})

describe('resumableBody and a client that leaves', () => {
  it('closes a continuation that was still opening when the client left', async () => {
    const a = scriptedNode()
    let cancelled = false
    let answer!: (b: UpstreamBody) => void
    const next: UpstreamBody = { body: new ReadableStream({ cancel: () => void (cancelled = true) }) }
    const body = resumableBody(a.body, { ends: OPENAI, maxResumes: 2, stallMs: 10_000, reopen: () => new Promise((r) => (answer = r)) })
    const pushed = body.pushTo!({ chunk: () => true, end() {}, error() {} })
    a.fail()
    pushed.cancel(new Error('client left'))
    answer(next)
    await new Promise((r) => setImmediate(r))
    expect(cancelled).toBe(true)
  })
})
