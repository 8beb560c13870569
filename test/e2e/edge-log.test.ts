/**
 * Under the local stack's default edge (`wrangler dev`), the edge's per-request JSON log lines
 * reach the edge's log file (.stack/logs/edge.log under `npm start`), as they do for the Node
 * entry: the Supervisor pipes the child's stdout and stderr there, and wrangler must print the
 * Worker's console.log to them. Never a key or a prompt in them.
 */
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_EDGE_KIND, EDGE_KINDS, type EdgeKind } from '../../infra/local/stack-config.ts'
import { edgePost } from './support/clients.ts'
import { pollUntil, startTestStack, type TestStack } from './support/stack.ts'

/** `ZL_EDGE_LOG_KIND=wrangler` checks the same under wrangler's dev engine (default: npm start's edge). */
const KIND = (process.env.ZL_EDGE_LOG_KIND ?? DEFAULT_EDGE_KIND) as EdgeKind
if (!EDGE_KINDS.includes(KIND) || KIND === 'node') throw new Error(`ZL_EDGE_LOG_KIND must be a Workers edge kind, got ${KIND}`)

let stack: TestStack

beforeAll(async () => {
  stack = await startTestStack({ regions: 1, edge: KIND })
})

afterAll(async () => {
  await stack?.stop()
})

/** The edge log's JSON lines (wrangler may prefix or colour what it prints: the JSON object is found in the line). */
function edgeLogLines(): Array<Record<string, unknown>> {
  const text = readFileSync(stack.running.supervisor.logFile('edge'), 'utf8')
  const out: Array<Record<string, unknown>> = []
  for (const line of text.split('\n')) {
    const start = line.indexOf('{')
    if (start < 0) continue
    try {
      out.push(JSON.parse(line.slice(start)) as Record<string, unknown>)
    } catch {
      // Not one of the edge's lines.
    }
  }
  return out
}

describe('the wrangler dev edge', () => {
  it('writes one request log line per request to its log file, without the key or the prompt', async () => {
    const requestId = `edge-log-${crypto.randomUUID()}`
    const prompt = `secret prompt ${crypto.randomUUID()}`
    const res = await edgePost(stack.edgeUrl, '/v1/chat/completions', { model: stack.model, messages: [{ role: 'user', content: prompt }], max_tokens: 2 }, { apiKey: stack.devApiKey, headers: { 'x-request-id': requestId } })
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    const line = await pollUntil(async () => edgeLogLines().find((l) => l.requestId === requestId), (l) => l !== undefined, 'the request log line in edge.log')
    expect(line).toMatchObject({ msg: 'request', method: 'POST', route: '/v1/chat/completions', status: 200 })
    const text = readFileSync(stack.running.supervisor.logFile('edge'), 'utf8')
    expect(text).not.toContain(stack.devApiKey)
    expect(text).not.toContain(prompt)
  })
})
