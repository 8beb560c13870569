/**
 * A node started with EDGE_SHARED_SECRET (no ALLOW_UNSIGNED) refuses unsigned, mis-signed and
 * stale requests with 401 in the dialect's shape (the SDKs' AuthenticationError), and serves a
 * request signed with shared/src/signature.ts exactly as the edge signs it (DESIGN.md §4).
 */
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { signRequest } from '../../shared/src/signature.ts'
import { startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'
import { CHAT, MESSAGES, post } from './sse-client.ts'

const SECRET = 'node-test-edge-secret'
let node: GpuNodeProcess

beforeAll(async () => {
  node = await startGpuNode({ env: { EDGE_SHARED_SECRET: SECRET } })
})

afterAll(async () => {
  await node?.stop()
})

const chatBody = { model: 'tiny', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, temperature: 0 }

async function signedHeaders(path: string, body: string, opts: { secret?: string; nowMs?: number; requestId?: string } = {}): Promise<Record<string, string>> {
  const requestId = opts.requestId ?? `sig-${Math.random().toString(36).slice(2)}`
  const signature = await signRequest({
    secret: opts.secret ?? SECRET,
    method: 'POST',
    path,
    requestId,
    body: new TextEncoder().encode(body),
    nowMs: opts.nowMs ?? Date.now(),
  })
  return { 'x-request-id': requestId, 'x-zl-signature': signature }
}

/** What the edge does to every forwarded request, as an SDK `fetch`: sign the exact body bytes. */
const signingFetch: typeof fetch = async (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input))
  const body = typeof init?.body === 'string' ? init.body : ''
  const headers = new Headers(init?.headers)
  for (const [k, v] of Object.entries(await signedHeaders(url.pathname, body))) headers.set(k, v)
  return fetch(input, { ...init, headers })
}

describe('edge signatures on a node that requires them', () => {
  it('answers an unsigned OpenAI request with AuthenticationError (401)', async () => {
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 0 })
    const err = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401)
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).type).toBe('authentication_error')
  })

  it('answers an unsigned Anthropic request with AuthenticationError (401)', async () => {
    const client = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 0 })
    const err = await client.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError)
    expect((err as InstanceType<typeof Anthropic.AuthenticationError>).error).toMatchObject({ type: 'error', error: { type: 'authentication_error' } })
  })

  it('serves a request signed with signRequest', async () => {
    const body = JSON.stringify(chatBody)
    const res = await post(node.url, CHAT, body, { headers: await signedHeaders(CHAT, body, { requestId: 'signed-1' }) })
    expect(res.status).toBe(200)
    expect(res.headers.get('x-request-id')).toBe('signed-1')
    const json = (await res.json()) as { choices: Array<{ finish_reason: string }>; usage: { completion_tokens: number } }
    expect(json.choices[0]!.finish_reason).toMatch(/^(stop|length)$/)
    expect(json.usage.completion_tokens).toBeGreaterThan(0)
  })

  it('serves both SDKs, streamed and whole, when their requests are signed like the edge signs them', async () => {
    const openai = new OpenAI({ apiKey: 'unused', baseURL: `${node.url}/v1`, maxRetries: 0, fetch: signingFetch })
    const whole = await openai.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }], max_tokens: 6, temperature: 0 })
    let streamed = ''
    for await (const c of await openai.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }], max_tokens: 6, temperature: 0, stream: true })) {
      streamed += c.choices[0]?.delta.content ?? ''
    }
    expect(streamed).toBe(whole.choices[0]!.message.content)

    const anthropic = new Anthropic({ apiKey: 'unused', baseURL: node.url, maxRetries: 0, fetch: signingFetch })
    const msg = await anthropic.messages.stream({ model: 'tiny', max_tokens: 6, messages: [{ role: 'user', content: 'hello' }] }).finalMessage()
    expect(msg.usage.output_tokens).toBeGreaterThan(0)
  })

  it.each([
    ['signed with another secret', { secret: 'not-the-secret' }],
    ['signed 60 s ago', { nowMs: Date.now() - 60_000 }],
    ['signed 60 s in the future', { nowMs: Date.now() + 60_000 }],
  ])('refuses a request %s with 401 in each dialect', async (_name, opts) => {
    for (const [path, body, type] of [
      [CHAT, JSON.stringify(chatBody), 'authentication_error'],
      [MESSAGES, JSON.stringify({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }), 'authentication_error'],
    ] as const) {
      const res = await post(node.url, path, body, { headers: await signedHeaders(path, body, opts) })
      expect(res.status).toBe(401)
      const json = (await res.json()) as { error: { type: string } }
      expect(json.error.type).toBe(type)
    }
  })

  it('refuses a body changed after signing, a signature for another path, and a malformed header', async () => {
    const body = JSON.stringify(chatBody)
    const headers = await signedHeaders(CHAT, body)
    expect((await post(node.url, CHAT, body.replace('hello', 'HELLO'), { headers })).status).toBe(401)
    expect((await post(node.url, CHAT, body, { headers: await signedHeaders('/v1/completions', body) })).status).toBe(401)
    expect((await post(node.url, CHAT, body, { headers: { ...headers, 'x-zl-signature': 'garbage' } })).status).toBe(401)
    // A request id other than the signed one breaks the signature too.
    expect((await post(node.url, CHAT, body, { headers: { ...headers, 'x-request-id': 'someone-else' } })).status).toBe(401)
  })
})

/**
 * The prefix cache is per tenant (vLLM's cache_salt): a tenant's repeat of a prompt finds it
 * cached, another tenant's identical prompt does not — from the tenant the signed request names.
 */
describe('the prefix cache behind signatures', () => {
  const longChat = { model: 'tiny', messages: [{ role: 'system', content: 'You are a careful assistant for the signature tests, answering in a few words only.' }, { role: 'user', content: 'hello' }], max_tokens: 2, temperature: 0 }
  const cachedFor = async (tenant: string): Promise<number> => {
    const body = JSON.stringify(longChat)
    const res = await post(node.url, CHAT, body, { headers: { ...(await signedHeaders(CHAT, body)), 'x-zl-tenant': tenant } })
    expect(res.status).toBe(200)
    const json = (await res.json()) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } }
    expect(json.usage.prompt_tokens).toBeGreaterThan(16)
    return json.usage.prompt_tokens_details.cached_tokens
  }

  it('shares cached blocks within a tenant and never across tenants', async () => {
    expect(await cachedFor('tenant-a')).toBe(0)
    expect(await cachedFor('tenant-a')).toBeGreaterThan(0)
    expect(await cachedFor('tenant-b')).toBe(0)
    expect(await cachedFor('tenant-b')).toBeGreaterThan(0)
  })
})
