/**
 * Stored responses through the real stack (redis-server, the Upstash bridge, three GPU nodes in
 * one region, the Node edge), with the official `openai` SDK unmodified: `previous_response_id`
 * conversations routed to the node that holds their prefix, retrieve / input_items / delete, a
 * tenant that cannot see another's, and a function-calling loop.
 */
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createKey } from '../../infra/keys/key-admin.ts'
import { stackNodes } from '../../infra/local/stack-config.ts'
import { Metrics } from '../node/gpu-node-process.ts'
import { sseFrames, type SseFrame } from '../node/sse-client.ts'
import { edgePost, openaiClient, rejectionOf } from './support/clients.ts'
import { pollUntil, startTestStack, type TestStack } from './support/stack.ts'

let stack: TestStack
let openai: OpenAI
let nodeUrls: string[]
let nodeServices: string[]

beforeAll(async () => {
  stack = await startTestStack({ regions: 1, nodesPerRegion: 3, edge: 'node' })
  openai = openaiClient(stack.edgeUrl, { apiKey: stack.devApiKey })
  const nodes = stackNodes(stack.running.opts)
  nodeUrls = nodes.map((n) => `http://127.0.0.1:${n.port}`)
  nodeServices = nodes.map((n) => n.service)
})
afterAll(async () => {
  await stack?.stop()
})

/** Requests each node has answered so far. */
async function servedPerNode(): Promise<number[]> {
  return Promise.all(nodeUrls.map(async (url) => new Metrics(await (await fetch(`${url}/metrics`)).text()).value('zl_request_success_total')))
}

/** The echoed `store` (the SDK's Response type does not declare it). */
const storeOf = (r: object) => (r as { store?: boolean }).store

// Long enough to fill several prefix-cache blocks on its own.
const INSTRUCTIONS = `You are a careful assistant for a team that ships a global inference API. ${'Answer briefly and precisely, and say when you are unsure. '.repeat(12)}`

describe('previous_response_id', () => {
  it('a six-turn conversation: each turn continues the stored chain on the node that holds it, with cached input tokens on turns 2–6', async () => {
    const before = await servedPerNode()
    let previous: OpenAI.Responses.Response | undefined
    const turns: OpenAI.Responses.Response[] = []
    for (let turn = 1; turn <= 6; turn++) {
      const body = { model: stack.model, instructions: INSTRUCTIONS, input: `Question ${turn}: what changes between turn ${turn - 1} and turn ${turn}?`, max_output_tokens: 8, temperature: 0, ...(previous ? { previous_response_id: previous.id } : {}) }
      // Streamed and not, alternately: both keep their answer before it ends.
      const response = turn % 2 === 0 ? await openai.responses.stream(body).finalResponse() : await openai.responses.create(body)
      expect(response.status).toMatch(/completed|incomplete/)
      expect(storeOf(response)).toBe(true)
      expect(response.previous_response_id).toBe(previous?.id ?? null)
      if (previous) {
        // The whole chain is in its prompt: the previous prompt and answer, then the new turn.
        expect(response.usage!.input_tokens).toBeGreaterThan(previous.usage!.input_tokens + previous.usage!.output_tokens)
        expect(response.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0)
      }
      turns.push(response)
      previous = response
    }
    const after = await servedPerNode()
    const served = after.map((n, i) => n - before[i]!)
    // Every turn on one node: the one that held the conversation's prefix.
    expect(served.filter((n) => n > 0)).toEqual([6])

    // The last response's input is the whole conversation: six questions, five answers between them.
    const items: OpenAI.Responses.ResponseItem[] = []
    for await (const item of openai.responses.inputItems.list(turns[5]!.id, { order: 'asc', limit: 4 })) items.push(item)
    expect(items).toHaveLength(11)
    expect(items.map((i) => (i.type === 'message' ? i.role : i.type))).toEqual(['user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user'])
    expect(items[1]).toEqual(turns[0]!.output[0])
    const newest = await openai.responses.inputItems.list(turns[5]!.id, { limit: 1 })
    expect(newest.data[0]).toEqual(items[10])
    expect(newest.has_more).toBe(true)
  })

  it('an unknown, deleted or unstored previous response is a 404 naming previous_response_id', async () => {
    const unknown = await rejectionOf(openai.responses.create({ model: stack.model, input: 'hi', previous_response_id: 'resp_nonexistent', max_output_tokens: 2 }))
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError)
    expect((unknown as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ param: 'previous_response_id', type: 'invalid_request_error' })

    const unstored = await openai.responses.create({ model: stack.model, input: 'hi', store: false, max_output_tokens: 2 })
    expect(storeOf(unstored)).toBe(false)
    expect(await rejectionOf(openai.responses.retrieve(unstored.id))).toBeInstanceOf(OpenAI.NotFoundError)
    expect(await rejectionOf(openai.responses.create({ model: stack.model, input: 'again', previous_response_id: unstored.id, max_output_tokens: 2 }))).toBeInstanceOf(OpenAI.NotFoundError)
  })
})

describe('retrieve, input_items and delete', () => {
  it('retrieve gives the response as it was answered (JSON and stream alike); delete removes it; another tenant sees none of it', async () => {
    const created = await openai.responses.create({ model: stack.model, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Name a colour.' }] }], instructions: 'Be brief.', max_output_tokens: 6, metadata: { ticket: '42' } })
    expect(await openai.responses.retrieve(created.id)).toEqual(created)
    const streamed = await openai.responses.stream({ model: stack.model, input: 'Name a fruit.', max_output_tokens: 6 }).finalResponse()
    // finalResponse() adds the helper's own `output_parsed` and `parsed` fields.
    const { output_parsed: _, ...fromStream } = streamed
    expect(await openai.responses.retrieve(streamed.id)).toEqual({ ...fromStream, output: fromStream.output.map((item) => (item.type === 'message' ? { ...item, content: item.content.map((part) => { const { parsed: _p, ...rest } = part as typeof part & { parsed?: unknown }; return rest }) } : item)) })

    const items = await openai.responses.inputItems.list(created.id)
    expect(items.data).toEqual([{ id: `msg_${created.id.slice('resp_'.length)}_in0`, type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Name a colour.' }], status: 'completed' }])
    expect(items.has_more).toBe(false)

    // Another tenant: every route answers as for a response that does not exist.
    const { key } = await createKey(stack.upstash, { tenant: 'e2e-other-tenant' })
    const other = openaiClient(stack.edgeUrl, { apiKey: key })
    for (const attempt of [
      () => other.responses.retrieve(created.id),
      () => other.responses.inputItems.list(created.id),
      () => other.responses.delete(created.id),
      () => other.responses.create({ model: stack.model, input: 'continue', previous_response_id: created.id, max_output_tokens: 2 }),
    ]) {
      const err = await rejectionOf(attempt())
      expect(err).toBeInstanceOf(OpenAI.NotFoundError)
      expect(JSON.stringify((err as InstanceType<typeof OpenAI.APIError>).error)).not.toContain('e2e-other-tenant')
    }
    expect(await openai.responses.retrieve(created.id)).toEqual(created)

    await openai.responses.delete(created.id)
    expect(await rejectionOf(openai.responses.retrieve(created.id))).toBeInstanceOf(OpenAI.NotFoundError)
    expect(await rejectionOf(openai.responses.delete(created.id))).toBeInstanceOf(OpenAI.NotFoundError)
    expect(await rejectionOf(openai.responses.create({ model: stack.model, input: 'continue', previous_response_id: created.id, max_output_tokens: 2 }))).toBeInstanceOf(OpenAI.NotFoundError)
  })

  it('bad paging is a 400 naming the parameter; a key is needed', async () => {
    const created = await openai.responses.create({ model: stack.model, input: 'hi', max_output_tokens: 2 })
    const bad = await rejectionOf(openai.responses.inputItems.list(created.id, { limit: 0 }))
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError)
    expect((bad as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ param: 'limit' })
    const after = await rejectionOf(openai.responses.inputItems.list(created.id, { after: 'msg_nope' }))
    expect((after as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ param: 'after' })
    const res = await fetch(`${stack.edgeUrl}/v1/responses/${created.id}`)
    expect(res.status).toBe(401)
  })
})

describe('a function-calling loop', () => {
  it('function_call out; function_call_output back with previous_response_id; the answer continues the stored call', async () => {
    const tools: OpenAI.Responses.FunctionTool[] = [{ type: 'function', name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false }, strict: true }]
    const first = await openai.responses.create({ model: stack.model, input: 'Weather in Paris?', tools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 64, temperature: 0 })
    const call = first.output.find((item) => item.type === 'function_call')
    expect(call).toBeDefined()
    if (call?.type !== 'function_call') return
    expect(JSON.parse(call.arguments)).toEqual({ city: expect.any(String) })

    // Only the tool's result is sent: the call it answers is in the stored conversation.
    const second = await openai.responses.create({
      model: stack.model,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temperature_c": 21}' }],
      tools,
      tool_choice: 'none',
      max_output_tokens: 8,
      temperature: 0,
    })
    expect(second.output.every((item) => item.type === 'message')).toBe(true)
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens)
    const items = await openai.responses.inputItems.list(second.id, { order: 'asc' })
    expect(items.data.map((i) => i.type)).toEqual(['message', 'function_call', 'function_call_output'])
    expect(items.data[1]).toEqual(call)

    // Without the stored conversation the same result answers no call.
    const alone = await rejectionOf(openai.responses.create({ model: stack.model, input: [{ type: 'function_call_output', call_id: call.call_id, output: '{}' }], max_output_tokens: 2 }))
    expect(alone).toBeInstanceOf(OpenAI.BadRequestError)
  })
})

describe('a stored conversation\'s stream whose node dies', () => {
  /** Requests running on each node; -1 while one is down or still loading. */
  const runningPerNode = () => Promise.all(nodeUrls.map(async (url) => {
    try {
      return new Metrics(await (await fetch(`${url}/metrics`)).text()).value('zl_num_requests_running')
    } catch {
      return -1
    }
  }))

  async function stream(body: object, onFrame?: (frames: SseFrame[]) => void): Promise<SseFrame[]> {
    const res = await edgePost(stack.edgeUrl, '/v1/responses', body, { apiKey: stack.devApiKey })
    expect(res.status).toBe(200)
    const frames: SseFrame[] = []
    for await (const f of sseFrames(res)) {
      if (f.comment) continue
      frames.push(f)
      onFrame?.(frames)
    }
    return frames
  }
  const data = (frames: SseFrame[]) => frames.map((f) => JSON.parse(f.data) as { type: string; sequence_number: number; delta?: string; response?: OpenAI.Responses.Response })

  it('is resumed on another node exactly, which keeps the answer: retrieve gives what the client got, and the conversation goes on', async () => {
    const first = await openai.responses.create({ model: stack.model, instructions: 'Be brief.', input: 'Start a story.', max_output_tokens: 8, temperature: 0 })
    const body = { model: stack.model, instructions: 'Be brief.', previous_response_id: first.id, input: 'Go on, at length.', max_output_tokens: 300, ignore_eos: true, temperature: 0, stream: true }
    const undisturbed = data(await stream(body))

    let killed: number | undefined
    const frames = data(await stream(body, (got) => {
      // Mid-answer: some deltas delivered, most still to come.
      if (killed !== undefined || got.length !== 40) return
      void runningPerNode().then((running) => {
        killed = running.findIndex((n) => n > 0)
        const pid = killed >= 0 ? stack.running.supervisor.pid(nodeServices[killed]!) : undefined
        if (pid !== undefined) process.kill(pid, 'SIGKILL')
      })
    }))
    expect(killed).toBeGreaterThanOrEqual(0)
    // One stream, in order, without an error: the same events and text as the undisturbed run.
    expect(frames.map((f) => f.sequence_number)).toEqual(frames.map((_, i) => i))
    expect(frames.map((f) => f.type)).toEqual(undisturbed.map((f) => f.type))
    const text = (fs: typeof frames) => fs.map((f) => (f.type === 'response.output_text.delta' ? f.delta : '')).join('')
    expect(text(frames)).toBe(text(undisturbed))
    const final = frames.at(-1)!.response!
    expect(final.usage!.output_tokens).toBe(300)

    // The continuing node read the stored conversation and kept this answer.
    expect(await openai.responses.retrieve(final.id)).toMatchObject(final)
    const next = await openai.responses.create({ model: stack.model, instructions: 'Be brief.', previous_response_id: final.id, input: 'The end.', max_output_tokens: 2 })
    const items = await openai.responses.inputItems.list(next.id, { order: 'asc' })
    expect(items.data.map((i) => (i.type === 'message' ? i.role : i.type))).toEqual(['user', 'assistant', 'user', 'assistant', 'user'])
    expect(items.data[3]).toEqual(final.output[0])
    await pollUntil(runningPerNode, (ns) => ns.every((n) => n === 0), 'every node back and idle', 30_000, 50)
  })
})
