/**
 * The local stack with WAN delays (`npm start -- --edge node --rtt us-east:eu-west=70,…`,
 * infra/local/stack-wan.ts): the edge sits in us-east and reaches eu-west (RTT 70 ms) and
 * ap-south (RTT 190 ms) only through delaying relays on 127.0.0.1.
 * - a request served one region away pays about that RTT over one served locally (warm
 *   connections: the relays see one connection per node);
 * - a region outage on the real stack: with the us-east node SIGKILLed, bursts of us-east
 *   requests are served by the next-nearest region, eu-west (70 ms), never ap-south (190 ms),
 *   until us-east is back; the control, a client in ap-south in the same moment, is served there.
 *   (The heartbeat state that used to send such a burst to ap-south is rare on idle tiny-model
 *   nodes; edge/test/node/failover-wan.test.ts holds eu-west in it.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { regionsFor } from '../../infra/local/stack-config.ts'
import { parseWanFlags } from '../../infra/local/stack-wan.ts'
import { edgePost } from './support/clients.ts'
import { GEO, startTestStack, waitForStatus, type TestStack } from './support/stack.ts'

const RTT = { 'eu-west': 70, 'ap-south': 190 } as const

let stack: TestStack

beforeAll(async () => {
  stack = await startTestStack({ regions: 3, edge: 'node', wan: parseWanFlags(false, ['us-east:eu-west=70,us-east:ap-south=190,eu-west:ap-south=120'], regionsFor(3)) })
})

afterAll(async () => {
  await stack?.stop()
})

const MODEL = 'tiny'

/** One non-streaming request from a client in `geoRegion`; resolves with the serving region and the time to its response headers. */
async function ask(geoRegion: string, maxTokens = 1): Promise<{ region: string | null; ttfbMs: number; status: number }> {
  const t0 = performance.now()
  const res = await edgePost(stack.edgeUrl, '/v1/completions', { model: MODEL, prompt: `Hi from ${geoRegion}`, max_tokens: maxTokens, temperature: 0, ignore_eos: true }, { apiKey: stack.devApiKey, geo: GEO[geoRegion]! })
  const ttfbMs = performance.now() - t0
  await res.arrayBuffer()
  return { region: res.headers.get('x-zl-region'), ttfbMs, status: res.status }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

describe('the stack over a WAN', () => {
  it('shows the relays in the status lines, and a request served one region away pays about its RTT', async () => {
    expect(stack.status).toContain('WAN: edge in us-east; eu-west RTT 70 ms, ap-south RTT 190 ms (delaying relays on 127.0.0.1)')
    // Warm: the edge's first request per node, and the nodes' first requests.
    for (const r of ['us-east', 'eu-west', 'ap-south']) for (let i = 0; i < 2; i++) expect((await ask(r)).region).toBe(r)
    const local: number[] = []
    const remote: number[] = []
    for (let i = 0; i < 9; i++) {
      const l = await ask('us-east')
      const r = await ask('eu-west')
      expect([l.region, r.region]).toEqual(['us-east', 'eu-west'])
      local.push(l.ttfbMs)
      remote.push(r.ttfbMs)
    }
    // The relay never delivers early: nothing served there came back within one round trip.
    expect(Math.min(...remote)).toBeGreaterThanOrEqual(RTT['eu-west'])
    // About the RTT, no more: medians of 9 on a loaded 2-core box wander by a few tens of ms either way.
    const excess = median(remote) - median(local) - RTT['eu-west']
    const seen = `remote p50 ${median(remote).toFixed(1)} ms − local p50 ${median(local).toFixed(1)} ms − RTT ${RTT['eu-west']} ms`
    expect(excess, seen).toBeGreaterThan(-25)
    expect(excess, seen).toBeLessThan(40)
    // Warm connections: one per node, reused, not one per request.
    const euLink = stack.running.wan.links.find((l) => l.to === 'eu-west')!
    expect(euLink.relay.stats().connections).toBeLessThanOrEqual(2)
  })

  it('fails a killed region over to the next-nearest one for every request of a burst; a client near the far region is the control', async () => {
    for (const r of ['us-east', 'eu-west', 'ap-south']) expect((await ask(r)).region).toBe(r)
    process.kill(stack.nodePid('us-east')!, 'SIGKILL')
    await waitForStatus(stack, /gpu-node-us-east killed by SIGKILL/, 'the supervisor to report the kill')
    const served: Array<string | null> = []
    // 5 bursts of 9 concurrent us-east requests: each burst queues on eu-west, the region that takes us-east's load.
    for (let burst = 0; burst < 5; burst++) {
      const answers = await Promise.all(Array.from({ length: 9 }, () => ask('us-east', 16)))
      for (const a of answers) expect(a.status).toBe(200)
      served.push(...answers.map((a) => a.region))
    }
    const control = await Promise.all(Array.from({ length: 3 }, () => ask('ap-south')))
    const counts = served.reduce<Record<string, number>>((m, r) => ({ ...m, [String(r)]: (m[String(r)] ?? 0) + 1 }), {})
    // The supervisor brings us-east back after a 1 s back-off and its start-up; requests it takes once ready are right too.
    expect(counts['ap-south'] ?? 0, JSON.stringify(counts)).toBe(0)
    expect(counts['eu-west'] ?? 0, JSON.stringify(counts)).toBeGreaterThanOrEqual(9)
    expect(control.map((c) => c.region)).toEqual(['ap-south', 'ap-south', 'ap-south'])
  })
})
