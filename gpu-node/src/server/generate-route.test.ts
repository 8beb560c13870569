import http from 'node:http'
import type { LogFields } from './json-log.ts'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { edgeHeaders, h2Connect, json, readRest, readUntil, startTestNode, type TestNode } from '../../test/support/test-node.ts'

const MODEL = 'zl-test-model'
const chat = (extra: object = {}) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...extra })
const messages = (extra: object = {}) => JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...extra })

/** Lines of `data:` payloads in an SSE body. */
const dataLines = (sse: string) => sse.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6))

describe('generate routes (unsigned, direct use)', () => {
  let node: TestNode
  beforeAll(async () => {
    node = await startTestNode({ allowUnsigned: true, maxBodyBytes: 4096, contextLength: 64, keepAliveMs: 20 })
  })
  afterAll(() => node.close())
  afterEach(() => {
    node.engine.refuse = undefined
    node.engine.script = () => ({ texts: ['Hel', 'lo', '!'], reason: 'stop' })
  })

  const post = (path: string, body: string | Uint8Array, headers: Record<string, string> = {}) =>
    fetch(`${node.url}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } })

  it('answers OpenAI chat as JSON with usage and the request id', async () => {
    const res = await post('/v1/chat/completions', chat(), { 'x-request-id': 'abc-123' })
    expect(res.status).toBe(200)
    expect(res.headers.get('x-request-id')).toBe('abc-123')
    const body = await json(res)
    expect(body).toMatchObject({ id: 'chatcmpl-abc-123', object: 'chat.completion', model: MODEL })
    expect(body.choices[0]).toMatchObject({ message: { role: 'assistant', content: 'Hello!' }, finish_reason: 'stop' })
    expect(body.usage).toEqual({ prompt_tokens: 9, completion_tokens: 3, total_tokens: 12, prompt_tokens_details: { cached_tokens: 0 } })
  })

  it('hands the engine tokens, the context left as max_tokens, and the wire priority and deadline', async () => {
    const deadline = Date.now() + 60_000
    await (await post('/v1/chat/completions', chat(), { 'x-request-id': 'wire-1', 'x-zl-priority': '-3', 'x-zl-deadline-ms': String(deadline) })).json()
    const req = node.engine.submitted.find((r) => r.id === 'wire-1')!
    expect(req.promptTokens).toHaveLength(9) // "user: hi\n" as bytes
    expect(req.maxTokens).toBe(64 - 9)
    expect(req.priority).toBe(-3)
    expect(req.deadlineMs).toBe(deadline)
  })

  it('streams OpenAI chat with role first, finish_reason, usage chunk and [DONE]', async () => {
    const res = await post('/v1/chat/completions', chat({ stream: true, stream_options: { include_usage: true } }))
    expect(res.headers.get('content-type')).toContain('text/event-stream')
    expect(res.headers.get('cache-control')).toBe('no-cache')
    const lines = dataLines(await res.text())
    expect(lines.at(-1)).toBe('[DONE]')
    const chunks = lines.slice(0, -1).map((l) => JSON.parse(l))
    expect(chunks[0].choices[0].delta.role).toBe('assistant')
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello!')
    expect(chunks.at(-2).choices[0].finish_reason).toBe('stop')
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 3 } })
  })

  it('streams Anthropic messages as named events in order', async () => {
    node.engine.script = () => ({ texts: ['a', 'b'], reason: 'stop_sequence', stopSequence: 'END' })
    const res = await post('/v1/messages', messages({ stream: true, stop_sequences: ['END'] }))
    const events = (await res.text()).split('\n').filter((l) => l.startsWith('event: ')).map((l) => l.slice(7))
    expect(events[0]).toBe('message_start')
    expect(events.at(-1)).toBe('message_stop')
    expect(events).toContain('content_block_delta')
    expect(events).toContain('message_delta')
  })

  it('answers /v1/completions and echoes the prompt when asked', async () => {
    const res = await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'Say: ', echo: true, max_tokens: 5 }))
    const body = await json(res)
    expect(body.object).toBe('text_completion')
    expect(body.choices[0].text).toBe('Say: Hello!')
  })

  it('ends a stream that fails mid-way with one dialect error event', async () => {
    node.engine.script = () => ({ texts: ['x'], reason: 'error', errorCode: 'internal' })
    const res = await post('/v1/chat/completions', chat({ stream: true }))
    const lines = dataLines(await res.text())
    const last = JSON.parse(lines.at(-1)!)
    expect(last.error).toMatchObject({ type: 'server_error', code: 'internal' })
    expect(lines).not.toContain('[DONE]')
  })

  it('answers 413 in the dialect shape for a declared oversized body', async () => {
    const res = await post('/v1/messages', 'x'.repeat(10_000))
    expect(res.status).toBe(413)
    expect(await json(res)).toMatchObject({ type: 'error', error: { type: 'request_too_large' } })
  })

  it('answers 413 for an oversized chunked upload and stops reading it', async () => {
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        let text = ''
        res.on('data', (c) => (text += c))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
      })
      req.on('error', reject)
      req.write('x'.repeat(3000))
      req.write('x'.repeat(3000)) // past the 4096-byte limit; no end(): the server must not wait for it
    })
    expect(status).toBe(413)
    expect(JSON.parse(body).error).toMatchObject({ code: 'request_too_large', type: 'invalid_request_error' })
  })

  it('answers 413 over h2c without reading the rest', async () => {
    const session = await h2Connect(node.url)
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const stream = session.request({ ':method': 'POST', ':path': '/v1/chat/completions' })
        stream.on('response', (h) => resolve(Number(h[':status'])))
        stream.on('error', reject)
        stream.write('x'.repeat(5000))
      })
      expect(status).toBe(413)
    } finally {
      session.destroy()
    }
  })

  it('answers 400 invalid_json for bad JSON and for invalid UTF-8', async () => {
    const bad = await post('/v1/chat/completions', '{"model":')
    expect(bad.status).toBe(400)
    expect((await json(bad)).error).toMatchObject({ code: 'invalid_json', type: 'invalid_request_error' })

    const notUtf8 = await post('/v1/messages', new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]))
    expect(notUtf8.status).toBe(400)
    expect(await json(notUtf8)).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } })
  })

  it('answers 400 with the field named for an invalid body', async () => {
    const res = await post('/v1/chat/completions', chat({ n: 9 }))
    expect(res.status).toBe(400)
    expect((await json(res)).error.param).toBe('n')
  })

  it('answers 404 model_not_found for another model', async () => {
    const res = await post('/v1/chat/completions', JSON.stringify({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }))
    expect(res.status).toBe(404)
    expect((await json(res)).error.code).toBe('model_not_found')
    const anthropic = await post('/v1/messages', messages({ model: 'claude-9' }))
    expect(anthropic.status).toBe(404)
    expect((await json(anthropic)).error.type).toBe('not_found_error')
  })

  it('answers 400 context_length_exceeded for a long prompt and for a max_tokens past the context', async () => {
    const long = await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'x'.repeat(100) }))
    expect(long.status).toBe(400)
    expect((await json(long)).error.code).toBe('context_length_exceeded')

    const tooMany = await post('/v1/chat/completions', chat({ max_tokens: 60 }))
    expect(tooMany.status).toBe(400)
    const err = (await json(tooMany)).error
    expect(err).toMatchObject({ code: 'context_length_exceeded', param: 'max_tokens' })
    expect(err.message).toContain("maximum context length is 64 tokens")

    const anthropic = await post('/v1/messages', messages({ max_tokens: 1000 }))
    expect(anthropic.status).toBe(400)
    expect((await json(anthropic)).error.message).toContain('exceed context limit')
  })

  it('answers overload fast: 503 for OpenAI, 529 for Anthropic, with retry-after-ms', async () => {
    node.engine.refuse = { ok: false, code: 'overloaded', retryAfterMs: 2500 }
    const openai = await post('/v1/chat/completions', chat({ stream: true }))
    expect(openai.status).toBe(503)
    expect(openai.headers.get('retry-after-ms')).toBe('2500')
    expect(openai.headers.get('retry-after')).toBe('3')
    expect((await json(openai)).error.code).toBe('overloaded')

    const anthropic = await post('/v1/messages', messages())
    expect(anthropic.status).toBe(529)
    expect(anthropic.headers.get('retry-after-ms')).toBe('2500')
    expect(await json(anthropic)).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } })
  })

  it('aborts the engine request exactly once when the client closes a stream', async () => {
    let release!: () => void
    const gate = new Promise<void>((r) => (release = r))
    node.engine.script = (req) => ({ texts: ['never'], reason: 'stop', ...(req.id === 'gone-1' ? { gate } : {}) })
    const res = await post('/v1/chat/completions', chat({ stream: true }), { 'x-request-id': 'gone-1' })
    const { reader } = await readUntil(res.body!, (t) => t.includes('"role":"assistant"')) // the stream is open; now hang up
    await reader.cancel()
    await node.engine.abortedOnce('gone-1')
    release()
    // A second request on the node completing proves the server processed everything queued.
    await (await post('/v1/chat/completions', chat())).json()
    expect(node.engine.aborts.filter((id) => id === 'gone-1')).toHaveLength(1)
  })

  it('aborts once when an h2 client resets its stream', async () => {
    let release!: () => void
    const gate = new Promise<void>((r) => (release = r))
    node.engine.script = (req) => ({ texts: ['never'], reason: 'stop', ...(req.id === 'gone-h2' ? { gate } : {}) })
    const session = await h2Connect(node.url)
    try {
      const stream = session.request({ ':method': 'POST', ':path': '/v1/messages', 'x-request-id': 'gone-h2' })
      stream.on('error', () => {})
      stream.once('response', () => stream.close())
      stream.end(messages({ stream: true }))
      await node.engine.abortedOnce('gone-h2')
      release()
      await (await post('/v1/chat/completions', chat())).json()
      expect(node.engine.aborts.filter((id) => id === 'gone-h2')).toHaveLength(1)
    } finally {
      session.close()
    }
  })

  it('sends keep-alive comments while the first token is slow', async () => {
    let release!: () => void
    node.engine.script = () => ({ texts: ['late'], reason: 'stop', gate: new Promise<void>((r) => (release = r)) })
    const res = await post('/v1/chat/completions', chat({ stream: true }))
    const { text, reader } = await readUntil(res.body!, (t) => t.includes(': keep-alive\n\n'))
    expect(text).toContain(': keep-alive')
    release()
    const rest = await readRest(reader)
    expect(rest).toContain('late')
    expect(rest.trimEnd().endsWith('data: [DONE]')).toBe(true)
  })

  it('gives a reused request id its own engine id while the first is still running', async () => {
    let release!: () => void
    node.engine.script = (r) => (r.id === 'dup' ? { texts: ['a'], reason: 'stop', gate: new Promise<void>((res) => (release = res)) } : { texts: ['b'], reason: 'stop' })
    const first = post('/v1/chat/completions', chat(), { 'x-request-id': 'dup' })
    await node.engine.submittedOnce('dup')
    const second = await post('/v1/chat/completions', chat(), { 'x-request-id': 'dup' })
    expect(second.headers.get('x-request-id')).toBe('dup')
    expect((await json(second)).choices[0].message.content).toBe('b')
    release()
    expect((await json(await first)).choices[0].message.content).toBe('a')
  })

  it('answers unknown routes with a 404 in the OpenAI shape', async () => {
    const res = await fetch(`${node.url}/v1/nope`)
    expect(res.status).toBe(404)
    expect((await json(res)).error.code).toBe('not_found')
    expect(res.headers.get('x-request-id')).toBeTruthy()
  })
})

describe('edge signature', () => {
  let node: TestNode
  beforeAll(async () => {
    node = await startTestNode({ secret: 'test-edge-secret' })
  })
  afterAll(() => node.close())

  it('rejects a missing signature with a dialect-shaped 401', async () => {
    const openai = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body: chat() })
    expect(openai.status).toBe(401)
    expect((await json(openai)).error).toMatchObject({ type: 'authentication_error', code: 'unauthorized' })
    const anthropic = await fetch(`${node.url}/v1/messages`, { method: 'POST', body: messages() })
    expect(anthropic.status).toBe(401)
    expect(await json(anthropic)).toMatchObject({ type: 'error', error: { type: 'authentication_error' } })
  })

  it('rejects a signature over other bytes, another id or another secret', async () => {
    const body = chat()
    const tampered = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body: body + ' ', headers: await edgeHeaders('/v1/chat/completions', body) })
    expect(tampered.status).toBe(401)
    const headers = await edgeHeaders('/v1/chat/completions', body, 'id-a')
    const otherId = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body, headers: { ...headers, 'x-request-id': 'id-b' } })
    expect(otherId.status).toBe(401)
    const wrongSecret = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body, headers: await edgeHeaders('/v1/chat/completions', body, 'id-c', 'nope') })
    expect(wrongSecret.status).toBe(401)
  })

  it('accepts a valid signature', async () => {
    const body = messages()
    const res = await fetch(`${node.url}/v1/messages`, { method: 'POST', body, headers: await edgeHeaders('/v1/messages', body, 'signed-1') })
    expect(res.status).toBe(200)
    expect(res.headers.get('x-request-id')).toBe('signed-1')
    expect((await json(res)).content[0].text).toBe('Hello!')
  })
})

describe('request log', () => {
  it('writes one structured line per generate request, without prompt or body', async () => {
    const lines: LogFields[] = []
    const push = (f: LogFields) => void lines.push(f)
    const node = await startTestNode({ allowUnsigned: true, log: { info: push, warn: push, error: push } })
    try {
      const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'my secret prompt' }] })
      const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
      await (await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body, headers: { 'x-request-id': 'log-1', traceparent } })).text()
      await (await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body: '{' })).text()
      await (await fetch(`${node.url}/healthz`)).text()
      const requests = lines.filter((l) => l.msg === 'request')
      expect(requests).toHaveLength(2)
      expect(requests[0]).toMatchObject({
        requestId: 'log-1', traceparent, path: '/v1/chat/completions', status: 200, dialect: 'openai-chat',
        promptTokens: 23, completionTokens: 3, finishReason: 'stop',
      })
      expect(requests[0]!.ttftMs).toEqual(expect.any(Number))
      expect(requests[0]!.durationMs).toEqual(expect.any(Number))
      expect(requests[1]).toMatchObject({ status: 400, error: 'invalid_json' })
      expect(JSON.stringify(lines)).not.toContain('secret')
    } finally {
      await node.close()
    }
  })
})
