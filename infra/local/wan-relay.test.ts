/**
 * The WAN relay delays what it claims, measured with one clock (relay, target and client share
 * this process): the handshake floor (first client byte at the target ≥ 1.5 RTT after connect,
 * first target byte at the client ≥ 2 RTT), RTT/2 one way afterwards, a refused target seen
 * after one RTT, FIN after RTT/2 with half-close kept, and every byte in order through more than
 * the relay's in-flight bound. Upper bounds leave slack for a loaded machine; lower bounds are exact.
 */
import { randomBytes } from 'node:crypto'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import { afterEach, describe, expect, it } from 'vitest'
import { MAX_IN_FLIGHT_BYTES, startWanRelay, type WanRelay } from './wan-relay.ts'

const RTT = 60
/**
 * What a busy 2-core machine may add to one timer, ms (measured: up to ~35 ms at load average 8).
 * Repeated measurements are judged by their best, which is within TIGHT of the claim.
 */
const SLACK = 60
const TIGHT = 10

const cleanup: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f()
})

/** A target on 127.0.0.1 that timestamps every chunk it gets and runs `onSocket`. */
async function target(onSocket: (s: net.Socket, arrivals: Array<{ at: number; bytes: Buffer }>) => void): Promise<{ port: number; arrivals: Array<{ at: number; bytes: Buffer }> }> {
  const arrivals: Array<{ at: number; bytes: Buffer }> = []
  const sockets = new Set<net.Socket>()
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s)
    s.on('error', () => {})
    s.on('data', (bytes: Buffer) => arrivals.push({ at: performance.now(), bytes }))
    onSocket(s, arrivals)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanup.push(() => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy()
    server.close(() => resolve())
  }))
  return { port: (server.address() as AddressInfo).port, arrivals }
}

async function relayTo(port: number, rttMs = RTT): Promise<WanRelay> {
  const relay = await startWanRelay({ target: { host: '127.0.0.1', port }, rttMs })
  cleanup.push(() => relay.close())
  return relay
}

function connect(port: number): { socket: net.Socket; startedAt: number; connected: Promise<void> } {
  const startedAt = performance.now()
  const socket = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true })
  socket.on('error', () => {})
  cleanup.push(() => void socket.destroy())
  return { socket, startedAt, connected: new Promise((resolve) => socket.once('connect', () => resolve())) }
}

/** Resolves with the time the next `n` bytes have arrived on `socket`. */
function nextBytes(socket: net.Socket, n: number): Promise<{ at: number; bytes: Buffer }> {
  return new Promise((resolve) => {
    const parts: Buffer[] = []
    let got = 0
    const onData = (b: Buffer) => {
      parts.push(b)
      got += b.length
      if (got < n) return
      socket.off('data', onData)
      resolve({ at: performance.now(), bytes: Buffer.concat(parts) })
    }
    socket.on('data', onData)
  })
}

describe('WAN relay', () => {
  it('holds a new connection\'s first bytes for the handshake, then delays each way by RTT/2', async () => {
    const t = await target((s) => s.on('data', (b: Buffer) => s.write(b)))
    const relay = await relayTo(t.port)
    const c = connect(relay.port)
    await c.connected
    const echo1 = nextBytes(c.socket, 1)
    c.socket.write('a')
    const first = await echo1
    // SYN (RTT/2), SYN-ACK (RTT/2), then the data with the ACK (RTT/2); the echo back (RTT/2).
    expect(t.arrivals[0]!.at - c.startedAt).toBeGreaterThanOrEqual(1.5 * RTT)
    expect(t.arrivals[0]!.at - c.startedAt).toBeLessThan(1.5 * RTT + SLACK)
    expect(first.at - c.startedAt).toBeGreaterThanOrEqual(2 * RTT)
    expect(first.at - c.startedAt).toBeLessThan(2 * RTT + SLACK)

    // On the open connection: RTT/2 to the target, one RTT for the round trip.
    const oneWay: number[] = []
    const round: number[] = []
    for (let i = 0; i < 5; i++) {
      const sentAt = performance.now()
      const echo = nextBytes(c.socket, 1)
      c.socket.write('b')
      const back = await echo
      oneWay.push(t.arrivals.at(-1)!.at - sentAt)
      round.push(back.at - sentAt)
    }
    expect(Math.min(...oneWay)).toBeGreaterThanOrEqual(RTT / 2)
    expect(Math.min(...oneWay)).toBeLessThan(RTT / 2 + TIGHT)
    expect(Math.min(...round)).toBeGreaterThanOrEqual(RTT)
    expect(Math.min(...round)).toBeLessThan(RTT + TIGHT)
    expect(Math.max(...round)).toBeLessThan(RTT + SLACK)
    expect(relay.stats().connections).toBe(1)
  })

  it('delivers what the target says first (an HTTP/2 SETTINGS frame) no earlier than 2 RTT after connect', async () => {
    const t = await target((s) => s.write('hello'))
    const relay = await relayTo(t.port)
    const c = connect(relay.port)
    const got = await nextBytes(c.socket, 5)
    expect(got.bytes.toString()).toBe('hello')
    expect(got.at - c.startedAt).toBeGreaterThanOrEqual(2 * RTT)
    expect(got.at - c.startedAt).toBeLessThan(2 * RTT + SLACK)
  })

  it('resets the client one RTT after connect when nothing listens at the target', async () => {
    const free = net.createServer()
    await new Promise<void>((resolve) => free.listen(0, '127.0.0.1', resolve))
    const port = (free.address() as AddressInfo).port
    await new Promise<void>((resolve) => free.close(() => resolve()))
    const relay = await relayTo(port)
    const c = connect(relay.port)
    const closedAt = await new Promise<number>((resolve) => c.socket.once('close', () => resolve(performance.now())))
    expect(closedAt - c.startedAt).toBeGreaterThanOrEqual(RTT)
    expect(closedAt - c.startedAt).toBeLessThan(RTT + SLACK)
  })

  it('carries a FIN after RTT/2 and keeps the other direction open (half-close)', async () => {
    let endAt = 0
    const t = await target((s) => s.on('end', () => {
      endAt = performance.now()
      s.end('bye')
    }))
    const relay = await relayTo(t.port)
    const c = connect(relay.port)
    await c.connected
    c.socket.write('x')
    // Past the handshake floor, so the FIN's own delay is what is measured.
    await new Promise<void>((resolve) => {
      const check = () => (t.arrivals.length > 0 ? resolve() : setTimeout(check, 5))
      check()
    })
    const endSentAt = performance.now()
    const reply = nextBytes(c.socket, 3)
    const ended = new Promise<number>((resolve) => c.socket.once('end', () => resolve(performance.now())))
    c.socket.end()
    const got = await reply
    const clientEndAt = await ended
    expect(endAt - endSentAt).toBeGreaterThanOrEqual(RTT / 2)
    expect(got.bytes.toString()).toBe('bye')
    expect(clientEndAt - endSentAt).toBeGreaterThanOrEqual(RTT)
    expect(clientEndAt - endSentAt).toBeLessThan(RTT + SLACK)
  })

  it('keeps every byte in order through more than its in-flight bound, both ways', async () => {
    const t = await target((s) => s.pipe(s))
    const relay = await relayTo(t.port, 20)
    const payload = randomBytes(MAX_IN_FLIGHT_BYTES + 2 * 1024 * 1024)
    const c = connect(relay.port)
    await c.connected
    const back = nextBytes(c.socket, payload.length)
    // Chunks of varied sizes, as a busy HTTP/2 connection writes them.
    for (let at = 0, i = 0; at < payload.length; i++) {
      const n = [1, 17, 1400, 16_384, 65_536, 300_000][i % 6]!
      c.socket.write(payload.subarray(at, at + n))
      at += n
    }
    const got = await back
    expect(got.bytes.equals(payload)).toBe(true)
    expect(relay.stats().bytesUp).toBe(payload.length)
    expect(relay.stats().bytesDown).toBe(payload.length)
  })

  it('with RTT 0 is a plain relay (the same-region control)', async () => {
    const t = await target((s) => s.on('data', (b: Buffer) => s.write(b)))
    const relay = await relayTo(t.port, 0)
    const c = connect(relay.port)
    await c.connected
    const rounds: number[] = []
    for (let i = 0; i < 5; i++) {
      const sentAt = performance.now()
      const echo = nextBytes(c.socket, 2)
      c.socket.write('hi')
      const got = await echo
      expect(got.bytes.toString()).toBe('hi')
      rounds.push(got.at - sentAt)
    }
    expect(Math.min(...rounds)).toBeLessThan(TIGHT)
  })
})
