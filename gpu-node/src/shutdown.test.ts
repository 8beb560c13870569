import { EventEmitter } from 'node:events'
import { describe, expect, it } from 'vitest'
import { silentLogger } from '../test/support/silent-logger.ts'
import { createDrain, handleShutdownSignals } from './shutdown.ts'
import { json, readRest, readUntil, startTestNode } from '../test/support/test-node.ts'

const chat = (stream: boolean) => JSON.stringify({ model: 'zl-test-model', messages: [{ role: 'user', content: 'hi' }], stream })

describe('drain', () => {
  it('flips readyz to 503, refuses new requests, lets in-flight streams finish, then closes', async () => {
    const node = await startTestNode({ allowUnsigned: true })
    let release!: () => void
    const gate = new Promise<void>((r) => (release = r))
    node.engine.script = () => ({ texts: ['still', ' here'], reason: 'stop', gate })
    expect((await fetch(`${node.url}/readyz`)).status).toBe(200)

    const inFlight = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body: chat(true), headers: { 'x-request-id': 'in-flight' } })
    const { text: opening, reader } = await readUntil(inFlight.body!, (t) => t.includes('"role":"assistant"'))

    const beats: boolean[] = []
    const heartbeat = { beat: async () => void beats.push(node.state.draining), stop: async () => void beats.push(false) }
    const drain = createDrain({ state: node.state, engine: node.engine, server: node.server, log: silentLogger, heartbeat })
    const drained = drain()
    expect(drain()).toBe(drained) // a repeated signal joins the same drain

    const ready = await fetch(`${node.url}/readyz`)
    expect(ready.status).toBe(503)
    expect(await json(ready)).toEqual({ status: 'draining' })
    const refused = await fetch(`${node.url}/v1/messages`, { method: 'POST', body: JSON.stringify({ model: 'zl-test-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }) })
    expect(refused.status).toBe(529)
    expect(refused.headers.get('retry-after-ms')).toBeTruthy()
    expect((await json(refused)).error.message).toContain('draining')
    expect(beats).toEqual([true])

    release()
    const rest = await readRest(reader)
    expect(opening + rest).toContain('still')
    expect(rest.trimEnd().endsWith('data: [DONE]')).toBe(true)
    await drained
    expect(beats).toEqual([true, false]) // HDEL after the engine drained
    await expect(fetch(`${node.url}/healthz`)).rejects.toThrow()
  })
})

describe('shutdown signals', () => {
  const setup = (graceMs: number) => {
    const source = new EventEmitter()
    const exits: number[] = []
    let drains = 0
    let finish!: () => void
    const drained = new Promise<void>((r) => (finish = r))
    let t = 0
    handleShutdownSignals({
      drain: () => {
        drains++
        return drained
      },
      graceMs,
      exit: (code) => exits.push(code),
      log: silentLogger,
      source,
      now: () => t,
    })
    return { source, exits, drains: () => drains, finish, drained, advance: (ms: number) => (t += ms) }
  }

  it('drains once for repeated SIGTERMs and exits 0 when done', async () => {
    const s = setup(1000)
    s.source.emit('SIGTERM')
    s.advance(5000)
    s.source.emit('SIGTERM')
    expect(s.drains()).toBe(1)
    expect(s.exits).toEqual([])
    s.finish()
    await s.drained
    await Promise.resolve()
    expect(s.exits).toEqual([0])
  })

  it('treats a quick second SIGINT (npm forwarding) as the same drain and a later one as forced exit', () => {
    const s = setup(1000)
    s.source.emit('SIGINT')
    s.advance(10)
    s.source.emit('SIGINT')
    expect(s.exits).toEqual([])
    s.advance(1500)
    s.source.emit('SIGINT')
    expect(s.exits).toEqual([130])
    expect(s.drains()).toBe(1)
  })
})
