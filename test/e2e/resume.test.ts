/**
 * A stream survives its node's death (DESIGN.md §4 Resume), through the Node entry with three
 * real tiny-model nodes: SIGKILL the node carrying 8 streams (chat, completions, messages;
 * greedy, seeded, unseeded) and every stream completes in its dialect's strict shape with no
 * error event, the greedy and seeded ones with exactly the text of an undisturbed run; a stream
 * whose node dies twice is resumed twice and still exact; a third death ends it with one error
 * event. The undisturbed run is the control: a resume that repeated, dropped or re-sampled a
 * token would differ from it. Drain: a draining node finishes its stream itself (no resume), and
 * a drain forced after its grace period (SIGINT → exit 130) is resumed like a death.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sseFrames, type SseFrame } from '../node/sse-client.ts'
import { edgePost } from './support/clients.ts'
import { GEO, pollUntil, startTestStack, waitForStatus, type TestStack } from './support/stack.ts'
import { judgeStream, type StreamPath } from './support/stream-shape.ts'

let stack: TestStack
beforeAll(async () => {
  // A short stall bound, so the SIGSTOP test waits 2 s, not the default 15 s; tiny-model streams
  // on idle nodes never pause that long.
  // DRAIN_GRACE_MS: how long a drain runs before a SIGINT may force the exit (the drain tests).
  // UPSTREAM_CONNECT_TIMEOUT_MS: a just-restarted node's first answer can take over the default
  // 2 s under a loaded CI machine, and the edge then skips it as slow for 6 s — so a resume in
  // that window found no node (CI, twice: no_node at the second of two deaths). Slow-node
  // skipping has its own test (edge/test/workers/routing.test.ts); here the nodes are only slow.
  stack = await startTestStack({ regions: 3, edge: 'node', edgeVars: { STREAM_STALL_MS: String(STALL_MS), UPSTREAM_CONNECT_TIMEOUT_MS: '10000' }, nodeVars: { DRAIN_GRACE_MS: String(GRACE_MS) } })
})
afterAll(async () => {
  await stack?.stop()
})

const STALL_MS = 2000
const GRACE_MS = 200
const TOKENS = 600
const LONG = { max_tokens: TOKENS, ignore_eos: true, stream: true }
const REGION_NAMES = ['us-east', 'eu-west', 'ap-south']

interface Case {
  label: string
  path: StreamPath
  body: Record<string, unknown>
  /** Greedy or seeded: the text is a function of the request. */
  exact: boolean
}

const chat = (label: string, sampling: object, exact: boolean): Case => ({ label, path: '/v1/chat/completions', exact, body: { messages: [{ role: 'user', content: `Talk about ${label}` }], stream_options: { include_usage: true }, ...LONG, ...sampling } })
const CASES: Case[] = [
  chat('chat greedy', { temperature: 0 }, true),
  chat('chat seeded', { temperature: 1, seed: 11 }, true),
  chat('chat unseeded', { temperature: 1 }, false),
  { label: 'completions greedy', path: '/v1/completions', exact: true, body: { prompt: 'Once upon a time', stream_options: { include_usage: true }, ...LONG, temperature: 0 } },
  { label: 'completions seeded', path: '/v1/completions', exact: true, body: { prompt: 'In a land far away', stream_options: { include_usage: true }, ...LONG, temperature: 0.9, seed: 5 } },
  { label: 'messages greedy', path: '/v1/messages', exact: true, body: { messages: [{ role: 'user', content: 'Hello there' }], ...LONG, temperature: 0 } },
  { label: 'messages seeded', path: '/v1/messages', exact: true, body: { messages: [{ role: 'user', content: 'Hi again' }], ...LONG, temperature: 1, seed: 3 } },
  { label: 'messages unseeded', path: '/v1/messages', exact: false, body: { messages: [{ role: 'user', content: 'Hey' }], ...LONG, temperature: 1 } },
]

interface Held {
  frames: SseFrame[]
  ended: Promise<void>
  /** performance.now() when the stream ended here (undefined while it runs). */
  endedAt?: number
  region: string | null
}

async function open(c: Case): Promise<Held> {
  const res = await edgePost(stack.edgeUrl, c.path, { model: stack.model, ...c.body }, { apiKey: stack.devApiKey, geo: GEO['us-east'] })
  expect(res.status, c.label).toBe(200)
  const frames: SseFrame[] = []
  const held: Held = { frames, ended: Promise.resolve(), region: res.headers.get('x-zl-region') }
  held.ended = (async () => {
    try {
      for await (const f of sseFrames(res)) if (!f.comment) frames.push(f)
    } catch {
      // A reset is judged by the frames that arrived.
    } finally {
      held.endedAt = performance.now()
    }
  })()
  return held
}

/** Requests running on a region's node; -1 while it is down or not yet listening. */
async function running(region: string): Promise<number> {
  if (stack.nodePid(region) === undefined) return -1
  try {
    return (await stack.metrics(region)).value('zl_num_requests_running')
  } catch {
    return -1 // killed between the pid check and the scrape, or restarted and still loading
  }
}

/** The region (other than `not`) whose node runs at least `n` requests, as soon as one does. */
async function regionRunning(n: number, not: ReadonlySet<string>): Promise<string> {
  let found = ''
  await pollUntil(async () => {
    for (const r of REGION_NAMES) if (!not.has(r) && (await running(r)) >= n) return (found = r)
    return ''
  }, (r) => r !== '', `a region running ${n} of the streams`, 15_000, 5)
  return found
}

function kill(region: string): void {
  process.kill(stack.nodePid(region)!, 'SIGKILL')
}

/** Every node up (the supervisor restarts a killed one after its back-off) and idle. */
async function allBack(): Promise<void> {
  await pollUntil(() => Promise.all(REGION_NAMES.map(running)), (ns) => ns.every((n) => n === 0), 'every node up and idle', 30_000, 50)
  // Up is not enough: the edge skips a node that failed for its mark-down time (10 s) even once
  // it heartbeats again. A death in that window found no node to resume on (CI, once: no_node 1).
  await pollUntil(async () => (await regions()).nodes, (nodes) => nodes.length >= REGION_NAMES.length && nodes.every((n) => !n.down && n.fresh && !n.draining), 'no node marked down at the edge', 30_000, 50)
}

const reference = new Map<string, string>()

describe('a constrained stream (a tool call) whose node dies mid-call (Node entry)', () => {
  // One call whose argument is a long string: hundreds of grammar-constrained tokens to die in.
  const note = { type: 'object', properties: { text: { type: 'string', minLength: 400, maxLength: 420 } }, required: ['text'], additionalProperties: false }
  const body = {
    model: '',
    messages: [{ role: 'user', content: 'Write a note' }],
    // The prompt, with the tool listed, is ~475 tokens of the tiny model's 1024.
    max_tokens: 540,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    tools: [{ type: 'function', function: { name: 'write_note', parameters: note } }],
    tool_choice: 'required',
    parallel_tool_calls: false,
  }
  /** The frames' data, `created` made equal (a continuation is stamped when it runs) and the cache count dropped (its node found its own cache). */
  const normal = (frames: readonly SseFrame[]) =>
    frames.map((f) => {
      if (f.data === '[DONE]') return f.data
      const j = JSON.parse(f.data)
      delete j.created
      delete j.usage?.prompt_tokens_details
      return JSON.stringify(j)
    })
  async function stream(requestId: string): Promise<Held> {
    // One request id for both runs: a call's id is derived from it.
    // Served nearest ap-south: the tests after this one kill us-east's node, and the supervisor's
    // back-off grows with each death of the same node within a minute of its restart.
    const res = await edgePost(stack.edgeUrl, '/v1/chat/completions', { ...body, model: stack.model }, { apiKey: stack.devApiKey, geo: GEO['ap-south'], headers: { 'x-request-id': requestId } })
    expect(res.status, res.status === 200 ? '' : await res.clone().text()).toBe(200)
    const frames: SseFrame[] = []
    const held: Held = { frames, ended: Promise.resolve(), region: res.headers.get('x-zl-region') }
    held.ended = (async () => {
      for await (const f of sseFrames(res)) if (!f.comment) frames.push(f)
    })()
    return held
  }

  // First in the file, on fresh nodes: a node killed once is back within seconds, and everything
  // is back for the tests after.
  it('completes on another node with the bytes of an undisturbed run: the same call, the same arguments', async () => {
    const reference = await stream('tool-resume-reference')
    await reference.ended
    const args = reference.frames.flatMap((f) => (f.data.startsWith('{') ? (JSON.parse(f.data).choices[0]?.delta.tool_calls ?? []) : [])).map((d: { function: { arguments: string } }) => d.function.arguments).join('')
    expect(JSON.parse(args).text.length).toBeGreaterThanOrEqual(400)
    expect(reference.frames.some((f) => f.data.includes('"finish_reason":"tool_calls"'))).toBe(true)

    await allBack()
    const before = await resumeCounts()
    // The same request again (same id), killed once its call's arguments are streaming.
    const run = await stream('tool-resume-reference')
    await pollUntil(async () => run.frames.length > 60, (ok) => ok, 'the call under way', 15_000, 5)
    expect(REGION_NAMES).toContain(run.region)
    kill(run.region!)
    await run.ended
    expect(normal(run.frames)).toEqual(normal(reference.frames))
    expect((await resumeCounts()).resumed).toBe(before.resumed + 1)
    await allBack()
  })
})

describe('resume on another node after a node dies mid-stream (Node entry)', () => {
  it('an undisturbed run of the 8 streams (the reference texts)', async () => {
    const runs = await Promise.all(CASES.map(open))
    await Promise.all(runs.map((r) => r.ended))
    for (const [i, c] of CASES.entries()) {
      const v = judgeStream(c.path, runs[i]!.frames)
      expect(v.problems, c.label).toEqual([])
      expect(v.completionTokens, c.label).toBe(TOKENS)
      reference.set(c.label, v.text)
    }
  })

  it('SIGKILL of the node carrying 8 streams: all complete, strict shape, no error event, greedy and seeded texts exact', async () => {
    const before = await resumeCounts()
    const runs = await Promise.all(CASES.map(open))
    const region = await regionRunning(CASES.length, new Set())
    expect(runs.every((r) => r.region === region)).toBe(true)
    await pollUntil(async () => runs.every((r) => r.frames.length > 3), (ok) => ok, 'every stream under way', 15_000, 5)
    kill(region)
    await Promise.all(runs.map((r) => r.ended))
    for (const [i, c] of CASES.entries()) {
      const v = judgeStream(c.path, runs[i]!.frames)
      expect(v.errors, `${c.label}: no error event`).toBe(0)
      expect(v.problems, c.label).toEqual([])
      expect(v.completionTokens, `${c.label}: usage counts the whole answer`).toBe(TOKENS)
      if (c.exact) expect(v.text, `${c.label}: exactly the undisturbed text`).toBe(reference.get(c.label))
    }
    const after = await resumeCounts()
    expect(after.resumed - before.resumed).toBe(CASES.length)
  })

  it('two deaths in a row: resumed twice, still exact; a third death: one error event, last', async () => {
    await waitForStatus(stack, /is back/, 'the killed node to be restarted')
    await allBack()
    const greedy = CASES[0]!
    for (const deaths of [2, 3]) {
      const run = await open(greedy)
      const dead = new Set<string>()
      for (let d = 0; d < deaths; d++) {
        // On a miss, say where the stream stood (seen flaky once after the merge with main).
        const region = await regionRunning(1, dead).catch(async (e: Error) => {
          throw new Error(`${e.message}; deaths ${deaths}, death ${d}, dead ${[...dead]}, ${run.frames.length} frames, last ${JSON.stringify(run.frames.slice(-2))}, running ${await Promise.all(REGION_NAMES.map(running))}, regions ${JSON.stringify(await regions())}`)
        })
        const at = run.frames.length
        await pollUntil(async () => run.frames.length, (n) => n > at + 2, 'frames from the node before its death', 15_000, 2)
        kill(region)
        dead.add(region)
      }
      await run.ended
      const v = judgeStream(greedy.path, run.frames)
      if (deaths === 2) {
        expect(v.errors).toBe(0)
        expect(v.problems).toEqual([])
        expect(v.text).toBe(reference.get(greedy.label))
      } else {
        expect(v.errors).toBe(1)
        expect(run.frames.at(-1)!.data).toMatch(/^\{"error"/)
        expect(run.frames.some((f) => f.data === '[DONE]')).toBe(false)
      }
      await allBack()
    }
  })

  it('a node that stalls (SIGSTOP) mid-stream: resumed after the stall bound, exact; the node is resumed (SIGCONT) after', async () => {
    const greedy = CASES[0]!
    const run = await open(greedy)
    const region = await regionRunning(1, new Set())
    await pollUntil(async () => run.frames.length, (n) => n > 3, 'frames before the stall', 15_000, 2)
    const pid = stack.nodePid(region)!
    process.kill(pid, 'SIGSTOP')
    const stoppedAt = performance.now()
    try {
      await run.ended
    } finally {
      process.kill(pid, 'SIGCONT')
    }
    expect(performance.now() - stoppedAt).toBeGreaterThanOrEqual(STALL_MS - 50)
    const v = judgeStream(greedy.path, run.frames)
    expect(v.errors).toBe(0)
    expect(v.problems).toEqual([])
    expect(v.text).toBe(reference.get(greedy.label))
  })
})

describe('drain (Node entry)', () => {
  /** Long enough to outlive DRAIN_GRACE_MS on the draining node; its reference is its own undisturbed run. */
  const long: Case = { label: 'chat greedy long', path: '/v1/chat/completions', exact: true, body: { messages: [{ role: 'user', content: 'Drain me slowly' }], stream_options: { include_usage: true }, max_tokens: 960, ignore_eos: true, stream: true, temperature: 0 } }
  let undisturbed = ''

  /** Opens the long stream, and SIGTERMs its node once the stream is under way and the node is draining. */
  async function drainUnder(): Promise<{ run: Held; region: string; pid: number; stoppedAt: number }> {
    await allBack()
    if (undisturbed === '') {
      const ref = await open(long)
      await ref.ended
      undisturbed = judgeStream(long.path, ref.frames).text
      expect(undisturbed.length).toBeGreaterThan(0)
    }
    const run = await open(long)
    const region = await regionRunning(1, new Set())
    await pollUntil(async () => run.frames.length, (n) => n > 3, 'the stream under way', 15_000, 2)
    const pid = stack.nodePid(region)!
    process.kill(pid, 'SIGTERM')
    await pollUntil(async () => (await fetch(`${stack.nodeUrl(region)}/readyz`)).status, (s) => s === 503, 'the node draining', 5000, 5)
    // The grace is counted from the node's own handling of the SIGTERM, which is no later than
    // this answer: timed from the kill() instead, a node slow to handle the signal (a loaded
    // machine) got a SIGINT inside its grace, which only joins the drain (exit 0, in a full run).
    const stoppedAt = performance.now()
    return { run, region, pid, stoppedAt }
  }

  const exits = (region: string, how: string) => stack.status.filter((l) => l.startsWith(`gpu-node-${region} ${how}`)).length

  it('control: a drain that is not forced lets the stream finish on its node, not resumed', async () => {
    const before = await resumeCounts()
    const { run, region, pid } = await drainUnder()
    const cleanExits = exits(region, 'exited with code 0')
    await run.ended
    const v = judgeStream(long.path, run.frames)
    expect(v.errors).toBe(0)
    expect(v.problems).toEqual([])
    expect(v.text).toBe(undisturbed)
    expect((await resumeCounts()).resumed).toBe(before.resumed)
    // The node exits 0 after its streams, not forced.
    await pollUntil(async () => stack.nodePid(region), (p) => p !== pid, 'the drained node to exit', 15_000, 20)
    await pollUntil(async () => exits(region, 'exited with code 0'), (n) => n > cleanExits, 'the supervisor to report exit 0')
  })

  // Up to 3 drains: one whose stream ended on its node before the SIGINT was sent tested nothing.
  it('a drain forced after its grace period (SIGINT, exit 130) is resumed like a death: exact, no error event', { timeout: 150_000 }, async () => {
    const before = await resumeCounts()
    let forced: { run: Held; forcedEnd: string[] } | undefined
    for (let attempt = 1; !forced; attempt++) {
      const { run, region, pid, stoppedAt } = await drainUnder()
      const forcedExits = stack.status.filter((l) => l.startsWith(`gpu-node-${region} `) && !l.includes(' is back')).length
      // Frozen mid-stream, so the stream is certain to outlast the grace period (an idle node makes
      // the 960 tokens in about a second: a race with the grace otherwise, lost once in a full run).
      // A SIGINT after the grace forces the exit; it is delivered when the node continues.
      process.kill(pid, 'SIGSTOP')
      let sigintAt = Infinity
      try {
        await pollUntil(async () => performance.now() - stoppedAt, (ms) => ms >= GRACE_MS, 'the grace period to pass', 5000, 10)
        sigintAt = performance.now()
        process.kill(pid, 'SIGINT')
      } finally {
        process.kill(pid, 'SIGCONT')
      }
      await pollUntil(async () => stack.nodePid(region), (p) => p !== pid, 'the forced exit', 10_000, 20)
      // Forced, not a drain that ended by itself (exit 0): exit 130, or — when the SIGINT lands while
      // the engine's worker thread is inside an ONNX Runtime step, as after the SIGCONT here —
      // SIGABRT from process.exit under the running worker (a node-side finding, see the report).
      const forcedEnd = await pollUntil(async () => stack.status.filter((l) => l.startsWith(`gpu-node-${region} `) && !l.includes(' is back')).slice(forcedExits), (ls) => ls.length > 0, 'the supervisor to report the exit').catch((e: Error) => {
        throw new Error(`${e.message}; supervisor: ${JSON.stringify(stack.status.filter((l) => l.includes(region)).slice(-4))}; node log: ${stack.logTail(`gpu-node-${region}`, 6)}`)
      })
      // The stream's last frame reached this client before the SIGINT was sent: the node had
      // finished it before the freeze (frames can only arrive later than the node sends them),
      // so this drain had nothing left to force (CI, once: exit 0 under load). Any other exit 0
      // — the node still streaming after the SIGINT — fails below.
      if (run.endedAt !== undefined && run.endedAt < sigintAt && attempt < 3) {
        await run.ended
        continue
      }
      forced = { run, forcedEnd }
    }
    const { run, forcedEnd } = forced
    expect(forcedEnd[0]).toMatch(/ (exited with code 130|killed by SIGABRT);/)
    await run.ended
    const v = judgeStream(long.path, run.frames)
    expect(v.errors).toBe(0)
    expect(v.problems).toEqual([])
    expect(v.completionTokens).toBe(960)
    expect(v.text).toBe(undisturbed)
    // Forced while its stream was still on it: the stream was resumed elsewhere.
    expect((await resumeCounts()).resumed).toBe(before.resumed + 1)
  })
})

describe('a non-streaming request whose node dies before answering (Node entry)', () => {
  it('is answered by another node, transparently: 200, x-zl-failover 1, the undisturbed answer', async () => {
    await allBack()
    const body = { model: stack.model, messages: [{ role: 'user', content: 'Answer at length' }], max_tokens: 900, ignore_eos: true, temperature: 0 }
    const reference = await edgePost(stack.edgeUrl, '/v1/chat/completions', body, { apiKey: stack.devApiKey, geo: GEO['us-east'] })
    expect(reference.status).toBe(200)
    const want = ((await reference.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content
    await allBack()
    const pending = edgePost(stack.edgeUrl, '/v1/chat/completions', body, { apiKey: stack.devApiKey, geo: GEO['us-east'] })
    // Killed while it generates: the edge has its headers not yet (a JSON answer's come with the whole completion).
    const region = await regionRunning(1, new Set())
    kill(region)
    const res = await pending
    expect(res.status).toBe(200)
    expect(res.headers.get('x-zl-failover')).toBe('1')
    expect(res.headers.get('x-zl-region')).not.toBe(region)
    const answer = (await res.json()) as { choices: Array<{ message: { content: string }; finish_reason: string }>; usage: { completion_tokens: number } }
    expect(answer.choices[0]!.message.content).toBe(want)
    expect(answer.usage.completion_tokens).toBe(900)
  })
})

/** The edge's /v1/regions: its node table (with its mark-downs) and the resume counts. */
async function regions(): Promise<{ nodes: Array<{ id: string; down?: boolean; fresh?: boolean; draining?: boolean }>; resumes: { resumed: number; exhausted: number; no_node: number } }> {
  const res = await fetch(`${stack.edgeUrl}/v1/regions`, { headers: { authorization: `Bearer ${stack.adminToken}` } })
  return (await res.json()) as Awaited<ReturnType<typeof regions>>
}

async function resumeCounts(): Promise<{ resumed: number; exhausted: number; no_node: number }> {
  return (await regions()).resumes
}
