/**
 * Bad input over raw HTTP, in all three dialects, against the real node (MAX_BODY_BYTES 64 KiB):
 * each gets a clear 4xx in the dialect's error shape whose message never echoes the prompt, and
 * afterwards the process is alive, nothing is running and a normal request still works.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pollUntil, startGpuNode, type GpuNodeProcess } from './gpu-node-process.ts'
import { longPrompt } from './prompts.ts'
import { CHAT, COMPLETIONS, MESSAGES, post } from './sse-client.ts'

const MAX_BODY_BYTES = 64 * 1024
/** Put in every prompt: no error message may contain it. */
const SECRET = 'SECRET-PROMPT-7f3a9c'

let node: GpuNodeProcess

beforeAll(async () => {
  node = await startGpuNode({ env: { MAX_BODY_BYTES: String(MAX_BODY_BYTES) } })
})

afterAll(async () => {
  await node?.stop()
})

type Path = typeof CHAT | typeof COMPLETIONS | typeof MESSAGES
const PATHS: Path[] = [CHAT, COMPLETIONS, MESSAGES]

/** A valid request in the path's dialect, carrying `prompt` (SECRET by default). */
function valid(path: Path, prompt = SECRET): Record<string, unknown> {
  if (path === COMPLETIONS) return { model: 'tiny', prompt, max_tokens: 4 }
  return { model: 'tiny', messages: [{ role: 'user', content: prompt }], max_tokens: 4 }
}

interface Case {
  name: string
  /** The raw body, or a JSON value to serialize. */
  body: (path: Path) => string | Uint8Array | object
  /** Expected status; 400 unless stated. */
  status?: number
  /** A substring the message must contain (case-insensitive), to prove it is the clear one. */
  says: RegExp
  /** The OpenAI `param` expected, when one field is at fault. */
  param?: (path: Path) => string | null
  only?: Path[]
}

const promptField = (path: Path) => (path === COMPLETIONS ? 'prompt' : 'messages')

const CASES: Case[] = [
  { name: 'malformed JSON (truncated)', body: (p) => JSON.stringify(valid(p)).slice(0, -7), says: /not valid JSON/i },
  { name: 'an empty body', body: () => '', says: /empty/i },
  { name: 'a JSON array instead of an object', body: (p) => [valid(p)], says: /JSON object/i },
  { name: 'a JSON string instead of an object', body: () => JSON.stringify(SECRET), says: /JSON object/i },
  { name: 'null', body: () => 'null', says: /JSON object/i },
  { name: 'a number for model', body: (p) => ({ ...valid(p), model: 42 }), says: /'model' must be a string/i, param: () => 'model' },
  { name: 'a string for max_tokens', body: (p) => ({ ...valid(p), max_tokens: '10' }), says: /'max_tokens' must be/i, param: () => 'max_tokens' },
  { name: 'max_tokens 0', body: (p) => ({ ...valid(p), max_tokens: 0 }), says: /'max_tokens' must be at least 1/i, param: () => 'max_tokens' },
  { name: 'a string for temperature', body: (p) => ({ ...valid(p), temperature: SECRET }), says: /'temperature' must be a number/i, param: () => 'temperature' },
  { name: 'a boolean for stream', body: (p) => ({ ...valid(p), stream: 'yes' }), says: /'stream' must be a boolean/i, param: () => 'stream' },
  {
    name: 'a number as message content',
    body: (p) => ({ ...valid(p), messages: [{ role: 'user', content: 5 }] }),
    says: /'messages\[0\]\.content' must be/i,
    param: () => 'messages[0].content',
    only: [CHAT, MESSAGES],
  },
  { name: 'a number as prompt', body: () => ({ ...valid(COMPLETIONS), prompt: 5 }), says: /'prompt' must be/i, param: () => 'prompt', only: [COMPLETIONS] },
  { name: 'an unknown field', body: (p) => ({ ...valid(p), frobnicate: SECRET }), says: /'frobnicate' is not a supported parameter/i, param: () => 'frobnicate' },
  { name: 'a missing model', body: (p) => ({ ...valid(p), model: undefined }), says: /'model' is required/i, param: () => 'model' },
  { name: 'empty messages', body: (p) => ({ ...valid(p), messages: [] }), says: /'messages' must not be empty/i, param: () => 'messages', only: [CHAT, MESSAGES] },
  { name: 'an empty prompt', body: () => ({ ...valid(COMPLETIONS), prompt: '' }), says: /'prompt' must/i, param: () => 'prompt', only: [COMPLETIONS] },
  { name: 'n = 9', body: (p) => ({ ...valid(p), n: 9 }), says: /'n' must be at most 8/i, param: () => 'n', only: [CHAT, COMPLETIONS] },
  { name: 'n = 2 (not an Anthropic field)', body: (p) => ({ ...valid(p), n: 2 }), says: /'n' is not a supported parameter/i, only: [MESSAGES] },
  {
    name: 'max_tokens beyond the context',
    body: (p) => ({ ...valid(p), max_tokens: 5000 }),
    says: /context (length|limit)/i,
    param: () => 'max_tokens',
  },
  { name: 'a prompt longer than the context', body: (p) => valid(p, `${SECRET} ${longPrompt()}`), says: /context length|too long/i, param: promptField },
  {
    name: 'invalid UTF-8 in a string',
    body: (p) => {
      const [before, after] = JSON.stringify(valid(p)).split(SECRET) as [string, string]
      const enc = new TextEncoder()
      return Buffer.concat([enc.encode(before), enc.encode(SECRET), Buffer.from([0xff, 0xfe, 0xc3]), enc.encode(after)])
    },
    says: /UTF-8/,
  },
  {
    name: 'a body over MAX_BODY_BYTES',
    body: (p) => valid(p, `${SECRET} ${'x'.repeat(MAX_BODY_BYTES)}`),
    status: 413,
    says: /exceeds the limit of 65536 bytes/i,
  },
  {
    name: 'an image content part',
    body: (p) => ({
      ...valid(p),
      messages: [{ role: 'user', content: [{ type: p === CHAT ? 'image_url' : 'image', [p === CHAT ? 'image_url' : 'source']: { url: SECRET } }] }],
    }),
    says: /only text/i,
    only: [CHAT, MESSAGES],
  },
  {
    name: 'a tool message that answers no call',
    body: () => ({ ...valid(CHAT), messages: [{ role: 'user', content: 'x' }, { role: 'tool', content: SECRET, tool_call_id: 'call_1' }] }),
    says: /answers the tool call 'call_1', which no earlier assistant turn made/i,
    param: () => 'messages[1].tool_call_id',
    only: [CHAT],
  },
  {
    name: 'a tool_result that answers no call',
    body: () => ({ ...valid(MESSAGES), messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: SECRET }] }] }),
    says: /answers the tool call 'toolu_1', which no earlier assistant turn made/i,
    only: [MESSAGES],
  },
  {
    name: 'a tool whose parameters use a keyword the grammar engine cannot enforce',
    body: (p) => p === CHAT
      ? { ...valid(p), tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { [SECRET.slice(0, 8)]: { type: 'integer', multipleOf: 3 } } } } }] }
      : { ...valid(p), tools: [{ name: 'f', input_schema: { type: 'object', properties: { n: { type: 'integer', multipleOf: 3 } } } }] },
    says: /multipleOf' is not supported/i,
    only: [CHAT, MESSAGES],
  },
  {
    name: 'a tool name outside ^[a-zA-Z0-9_-]{1,64}$',
    body: (p) => (p === CHAT ? { ...valid(p), tools: [{ type: 'function', function: { name: 'no spaces' } }] } : { ...valid(p), tools: [{ name: 'no spaces', input_schema: { type: 'object' } }] }),
    says: /must be 1-64 characters/i,
    param: (p) => (p === CHAT ? 'tools[0].function.name' : 'tools[0].name'),
    only: [CHAT, MESSAGES],
  },
  {
    name: 'required tool use with no tools',
    body: (p) => (p === CHAT ? { ...valid(p), tool_choice: 'required' } : { ...valid(p), tool_choice: { type: 'any' } }),
    says: /requires a tool call, but the request has no 'tools'/i,
    param: () => 'tool_choice',
    only: [CHAT, MESSAGES],
  },
  {
    name: 'top_logprobs out of range',
    body: () => ({ ...valid(CHAT), logprobs: true, top_logprobs: 21 }),
    says: /'top_logprobs' must be at most 20/i,
    param: () => 'top_logprobs',
    only: [CHAT],
  },
  { name: 'a token-id prompt', body: () => ({ ...valid(COMPLETIONS), prompt: [1, 2, 3] }), says: /token-id prompts are not supported/i, only: [COMPLETIONS] },
]

interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null }
}
interface AnthropicErrorBody {
  type: 'error'
  error: { type: string; message: string }
}

function send(path: Path, body: string | Uint8Array | object): Promise<Response> {
  return post(node.url, path, typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body))
}

describe.each(PATHS)('bad input on %s', (path) => {
  const cases = CASES.filter((c) => !c.only || c.only.includes(path))

  it.each(cases.map((c) => [c.name, c] as const))('%s gets a clear 4xx in the dialect shape', async (_name, c) => {
    const res = await send(path, c.body(path))
    const text = await res.text()
    const status = c.status ?? 400
    expect(res.status, text).toBe(status)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(text).not.toContain(SECRET)
    const json = JSON.parse(text) as unknown
    if (path === MESSAGES) {
      const body = json as AnthropicErrorBody
      expect(Object.keys(body).sort()).toEqual(['error', 'type'])
      expect(body.type).toBe('error')
      expect(body.error.type).toBe(status === 413 ? 'request_too_large' : 'invalid_request_error')
      expect(body.error.message).toMatch(c.says)
    } else {
      const body = json as OpenAIErrorBody
      expect(Object.keys(body)).toEqual(['error'])
      expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type'])
      expect(body.error.type).toBe('invalid_request_error')
      expect(body.error.message).toMatch(c.says)
      expect(typeof body.error.code).toBe('string')
      if (c.param) expect(body.error.param).toBe(c.param(path))
    }
  })

  it('answers an unknown model with 404 in the dialect shape', async () => {
    const res = await send(path, { ...valid(path), model: 'no-such-model' })
    expect(res.status).toBe(404)
    const json = (await res.json()) as Record<string, Record<string, unknown>>
    if (path === MESSAGES) expect(json).toMatchObject({ type: 'error', error: { type: 'not_found_error' } })
    else expect(json.error).toMatchObject({ type: 'invalid_request_error', code: 'model_not_found', param: 'model' })
  })

  it('refuses GET with a 4xx in the dialect shape', async () => {
    const res = await fetch(`${node.url}${path}`)
    expect(res.status).toBeGreaterThanOrEqual(400)
    expect(res.status).toBeLessThan(500)
    const json = (await res.json()) as Record<string, unknown>
    if (path === MESSAGES) expect(json.type).toBe('error')
    else expect(json.error).toBeDefined()
  })

  // V8's SyntaxError text quotes the input around an unexpected token: the node must not pass it on.
  it('does not echo the prompt in the message for an unexpected token next to it', async () => {
    const body = JSON.stringify(valid(path)).replace(`"${SECRET}"`, `'${SECRET}'`)
    const res = await send(path, body)
    expect(res.status).toBe(400)
    expect(await res.text()).not.toContain(SECRET.slice(0, 6))
  })
})

describe('after all the bad input', () => {
  it('the node is alive, runs nothing, and answers a normal request in each dialect', async () => {
    expect(node.child.exitCode).toBeNull()
    expect((await fetch(`${node.url}/healthz`)).status).toBe(200)
    const m = await pollUntil(
      () => node.metrics(),
      (s) => s.value('zl_num_requests_running') === 0 && s.value('zl_num_requests_waiting') === 0,
      'zero running and waiting',
    )
    expect(m.value('zl_request_failure_total')).toBeGreaterThan(40)
    for (const path of PATHS) {
      const res = await send(path, { ...valid(path, 'hello'), max_tokens: 5, ignore_eos: true })
      expect(res.status).toBe(200)
      const json = (await res.json()) as { usage: Record<string, number> }
      expect(json.usage.completion_tokens ?? json.usage.output_tokens).toBe(5)
    }
  })
})
