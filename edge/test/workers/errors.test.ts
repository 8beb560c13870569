/**
 * Every refusal before a node is involved, in both dialects' shapes (DESIGN.md §6): OpenAI
 * `{ error: { message, type, param, code } }`, Anthropic `{ type: 'error', error: { type, message } }`.
 */
import { SELF } from 'cloudflare:test'
import { beforeAll, describe, expect, it } from 'vitest'
import { chatBody, createKey, edgeRequest, messagesBody, MODEL, received, uniqueRequestId, type TestKey } from './harness.ts'

const CHAT = '/v1/chat/completions'
const MESSAGES = '/v1/messages'

async function call(path: string, body: string | undefined, opts: Parameters<typeof edgeRequest>[2] = {}) {
  const res = await SELF.fetch(edgeRequest(path, body, opts))
  const text = await res.text()
  return { res, text, json: text ? (JSON.parse(text) as Record<string, any>) : undefined }
}

function expectOpenAIError(json: any, type: string, code: string) {
  expect(json).toEqual({ error: { message: expect.any(String), type, param: expect.toSatisfy((p: unknown) => p === null || typeof p === 'string'), code } })
}

function expectAnthropicError(json: any, type: string) {
  expect(json).toEqual({ type: 'error', error: { type, message: expect.any(String) } })
}

let good: TestKey
let disabled: TestKey
let narrow: TestKey

beforeAll(async () => {
  ;[good, disabled, narrow] = await Promise.all([createKey(), createKey({ disabled: true }), createKey({ models: ['other-model'] })])
})

describe('auth', () => {
  it('answers 401 in each dialect when no key is sent', async () => {
    const a = await call(CHAT, chatBody())
    expect(a.res.status).toBe(401)
    expectOpenAIError(a.json, 'authentication_error', 'unauthorized')
    const b = await call(MESSAGES, messagesBody())
    expect(b.res.status).toBe(401)
    expectAnthropicError(b.json, 'authentication_error')
  })

  it('answers 401 for malformed and unknown keys without echoing them', async () => {
    const unknown = 'zl-' + 'A'.repeat(32)
    for (const key of ['not-a-key', unknown]) {
      const a = await call(CHAT, chatBody(), { key })
      expect(a.res.status).toBe(401)
      expect(a.text).not.toContain(key)
      const b = await call(MESSAGES, messagesBody(), { key, auth: 'x-api-key' })
      expect(b.res.status).toBe(401)
      expectAnthropicError(b.json, 'authentication_error')
      expect(b.text).not.toContain(key)
    }
  })

  it('accepts the key as a bearer token and as x-api-key', async () => {
    expect((await call(CHAT, chatBody(), { key: good.key })).res.status).toBe(200)
    expect((await call(MESSAGES, messagesBody(), { key: good.key, auth: 'x-api-key' })).res.status).toBe(200)
  })

  it('answers 401 naming both headers when Authorization and x-api-key carry different credentials, whichever is valid; the same key in both is served', async () => {
    const other = 'zl-' + 'B'.repeat(32)
    const routes = [
      { path: CHAT, body: chatBody(), shape: (json: unknown) => expectOpenAIError(json, 'authentication_error', 'unauthorized') },
      { path: '/v1/completions', body: JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 4 }), shape: (json: unknown) => expectOpenAIError(json, 'authentication_error', 'unauthorized') },
      { path: MESSAGES, body: messagesBody(), shape: (json: unknown) => expectAnthropicError(json, 'authentication_error') },
    ]
    const pairs = [
      { authorization: `Bearer ${good.key}`, 'x-api-key': other },
      { authorization: `Bearer ${other}`, 'x-api-key': good.key },
      { authorization: 'Basic dXNlcjpwYXNz', 'x-api-key': good.key },
    ]
    for (const { path, body, shape } of routes) {
      for (const [i, headers] of pairs.entries()) {
        const r = await call(path, body, { headers })
        expect(r.res.status, `${path}, pair ${i}`).toBe(401)
        shape(r.json)
        const message: string = r.json!.error.message
        expect(message).toContain('Authorization')
        expect(message).toContain('x-api-key')
        expect(r.text).not.toContain(good.key)
        expect(r.text).not.toContain(other)
      }
      const same = await call(path, body, { headers: { authorization: `Bearer ${good.key}`, 'x-api-key': good.key } })
      expect(same.res.status, `${path}: the same key in both headers`).toBe(200)
    }
  })

  it('answers 403 permission_error for a disabled key', async () => {
    const a = await call(CHAT, chatBody(), { key: disabled.key })
    expect(a.res.status).toBe(403)
    expectOpenAIError(a.json, 'permission_error', 'forbidden')
    const b = await call(MESSAGES, messagesBody(), { key: disabled.key, auth: 'x-api-key' })
    expect(b.res.status).toBe(403)
    expectAnthropicError(b.json, 'permission_error')
  })
})

describe('models', () => {
  it('answers 404 for a model no node serves', async () => {
    const a = await call(CHAT, chatBody({ model: 'no-such-model' }), { key: good.key })
    expect(a.res.status).toBe(404)
    expectOpenAIError(a.json, 'invalid_request_error', 'model_not_found')
    expect(a.json!.error.param).toBe('model')
    const b = await call(MESSAGES, messagesBody({ model: 'no-such-model' }), { key: good.key })
    expect(b.res.status).toBe(404)
    expectAnthropicError(b.json, 'not_found_error')
  })

  it('answers the same 404 for a served model outside the key allowlist', async () => {
    const a = await call(CHAT, chatBody(), { key: narrow.key })
    expect(a.res.status).toBe(404)
    expect(a.json!.error.message).toBe(`The model '${MODEL}' does not exist or you do not have access to it.`)
    const b = await call(MESSAGES, messagesBody(), { key: narrow.key })
    expect(b.res.status).toBe(404)
    expectAnthropicError(b.json, 'not_found_error')
  })

  it('lists the models of fresh nodes in the OpenAI list shape', async () => {
    const a = await call('/v1/models', undefined, { key: good.key })
    expect(a.res.status).toBe(200)
    expect(a.json).toEqual({ object: 'list', data: [{ id: MODEL, object: 'model', created: 0, owned_by: 'zerolayer' }] })
  })

  it('answers an unknown route 404 in the dialect of its path', async () => {
    const a = await call('/v1/nothing', '{}', { key: good.key })
    expect(a.res.status).toBe(404)
    expectOpenAIError(a.json, 'invalid_request_error', 'not_found')
  })
})

describe('body', () => {
  it('answers 415 for valid JSON declared as text/plain or a form, in each dialect', async () => {
    for (const type of ['text/plain;charset=UTF-8', 'application/x-www-form-urlencoded']) {
      const a = await call(CHAT, chatBody(), { key: good.key, headers: { 'content-type': type } })
      expect(a.res.status).toBe(415)
      expectOpenAIError(a.json, 'invalid_request_error', 'unsupported_media_type')
      expect(a.json!.error.message).toContain("'Content-Type: application/json'")
      const b = await call(MESSAGES, messagesBody(), { key: good.key, headers: { 'content-type': type } })
      expect(b.res.status).toBe(415)
      expectAnthropicError(b.json, 'invalid_request_error')
    }
    expect((await call(CHAT, chatBody(), { key: good.key, headers: { 'content-type': 'application/json; charset=utf-8' } })).res.status).toBe(200)
  })

  it('answers 413 from content-length without reading the body', async () => {
    const big = 'x'.repeat(1024 * 1024 + 1)
    const a = await call(CHAT, big, { key: good.key })
    expect(a.res.status).toBe(413)
    expectOpenAIError(a.json, 'invalid_request_error', 'request_too_large')
    const b = await call(MESSAGES, big, { key: good.key })
    expect(b.res.status).toBe(413)
    expectAnthropicError(b.json, 'request_too_large')
  })

  it('answers 413 for a chunked body that grows past the limit', async () => {
    const chunk = new Uint8Array(256 * 1024).fill(0x20)
    let sent = 0
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 8) controller.enqueue(chunk)
        else controller.close()
      },
    })
    const req = new Request(`https://edge.test${MESSAGES}`, { method: 'POST', headers: { 'x-api-key': good.key, 'content-type': 'application/json' }, body, duplex: 'half' } as RequestInit)
    const res = await SELF.fetch(req)
    expect(res.status).toBe(413)
    expectAnthropicError(await res.json(), 'request_too_large')
  })

  it('answers 400 for invalid JSON and invalid fields, naming the field', async () => {
    const a = await call(CHAT, '{"model":', { key: good.key })
    expect(a.res.status).toBe(400)
    expectOpenAIError(a.json, 'invalid_request_error', 'invalid_json')
    const b = await call(CHAT, chatBody({ n: 9 }), { key: good.key })
    expect(b.res.status).toBe(400)
    expect(b.json!.error.param).toBe('n')
    const c = await call(MESSAGES, messagesBody({ max_tokens: undefined }), { key: good.key })
    expect(c.res.status).toBe(400)
    expectAnthropicError(c.json, 'invalid_request_error')
    expect(c.json!.error.message).toContain('max_tokens')
    const d = await call(MESSAGES, messagesBody({ tool_choice: { type: 'any' } }), { key: good.key })
    expect(d.res.status).toBe(400)
    expect(d.json!.error.message).toContain('tool_choice')
  })
})

describe('forwarding', () => {
  it('sends the original bytes with the wire headers and a signature the node verifies', async () => {
    const requestId = uniqueRequestId()
    // Unusual spacing and key order: the node must receive these exact bytes.
    const body = `{ "messages":[{"role":"user","content":"hi"}],   "model":"${MODEL}", "max_tokens": 4 }`
    const a = await call(CHAT, body, { key: good.key, requestId, headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } })
    expect(a.res.status).toBe(200)
    expect(a.res.headers.get('x-request-id')).toBe(requestId)
    const [got] = await received(requestId)
    expect(got!.body).toBe(body)
    expect(got!.signature).toBe('ok')
    expect(got!.headers['x-zl-tenant']).toBe('test')
    expect(got!.headers['x-zl-key-id']).toBe(good.id)
    expect(got!.headers['x-zl-priority']).toBe('0')
    expect(Number(got!.headers['x-zl-deadline-ms'])).toBeGreaterThan(Date.now())
    expect(got!.headers['traceparent']).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/)
    expect(got!.headers['x-zl-edge']).toBeTruthy()
    expect(JSON.stringify(got!.headers)).not.toContain(good.key)
  })

  it('adds x-zl-region and server-timing to the node response', async () => {
    const a = await call(CHAT, chatBody(), { key: good.key })
    expect(a.res.headers.get('x-zl-region')).toBeTruthy()
    expect(a.res.headers.get('server-timing')).toMatch(/^edge;dur=\d+, upstream;dur=\d+$/)
    expect(a.res.headers.get('x-zl-failover')).toBeNull()
    expect(a.json!.choices[0].message.content).toMatch(/^hello from /)
  })
})
