/**
 * A userspace WAN between two local processes: a TCP relay on 127.0.0.1 that delays every byte by
 * half a round trip in each direction, as a long-haul link would. This machine's kernel has no
 * netem qdisc (and tests run without root), so the delay lives here.
 *
 * What it models, per connection accepted at t0 (the client's connect()):
 * - the TCP handshake: the relay opens its own connection to the target at t0 + RTT/2 (when the
 *   SYN would arrive; a refused target resets the client at t0 + RTT, as the RST would), no client
 *   byte reaches the target before t0 + 1.5 RTT (SYN, SYN-ACK, then the first data with the ACK)
 *   and no target byte reaches the client before t0 + 2 RTT (the target only sees a connection
 *   once the handshake completes, at 1.5 RTT);
 * - after that, RTT/2 one way for every byte, in order (a chunk never overtakes an earlier one);
 * - FIN and resets travel the same way: an end or a close reaches the other side RTT/2 later.
 *
 * What it does not model: bandwidth, loss, and TCP's own ACK clock. Between relay and endpoints
 * is loopback, where ACKs return at once, so Nagle's algorithm, delayed ACKs, slow start and
 * receive windows never show their WAN cost here; the relay's own sockets set TCP_NODELAY so the
 * relay adds none either. Those effects are checked in the endpoints' socket options instead
 * (docs/PERFORMANCE.md, *Cross-region requests*). Memory is bounded: a direction holding more than
 * MAX_IN_FLIGHT_BYTES stops reading its source until it has delivered enough.
 */
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'

/** Bytes one direction may hold in flight before it stops reading its source (a receive window, roughly). */
export const MAX_IN_FLIGHT_BYTES = 4 * 1024 * 1024

export interface WanRelayOptions {
  /** Where the far side listens (the remote region's node). */
  target: { host: string; port: number }
  /** Round-trip time of the simulated link, ms (0: a plain relay, for a same-region control). */
  rttMs: number
  /** Listen port (0: the OS picks). The relay listens on 127.0.0.1 only. */
  port?: number
}

export interface WanRelayStats {
  /** Client connections accepted so far: a pooled client keeps this at 1. */
  connections: number
  /** Connections open now. */
  open: number
  bytesUp: number
  bytesDown: number
}

export interface WanRelay {
  port: number
  /** `http://127.0.0.1:<port>`: the URL to give a client instead of the target's. */
  url: string
  rttMs: number
  stats(): WanRelayStats
  /** Stops accepting and destroys every connection. */
  close(): Promise<void>
}

type Item = { at: number; kind: 'data'; bytes: Buffer } | { at: number; kind: 'end' } | { at: number; kind: 'destroy' }

/**
 * One direction of one connection: a FIFO of what the source sent, each item due at its arrival
 * time. Arrival times never decrease, so delivering the head first keeps the byte order.
 */
class DelayLine {
  private readonly queue: Item[] = []
  private timer: NodeJS.Timeout | undefined
  private last = 0
  private queuedBytes = 0
  private blocked = false
  private ended = false
  private stopped = false
  private dest: net.Socket | undefined

  constructor(
    private readonly oneWayMs: number,
    /** No item is delivered before this (performance.now() ms): the handshake's floor. */
    private readonly notBefore: number,
    private readonly source: net.Socket,
    private readonly onDeliver: (bytes: number) => void,
  ) {}

  /** The destination exists from here on (for the upstream direction: once the relay's own connect succeeded). */
  attach(dest: net.Socket): void {
    this.dest = dest
    dest.on('drain', () => {
      this.blocked = false
      this.pump()
    })
    this.pump()
  }

  /** Data and an end are taken until the end; a destroy (the source closed or reset) always. */
  push(kind: Item['kind'], bytes?: Buffer): void {
    if (this.stopped || (this.ended && kind !== 'destroy')) return
    if (kind === 'end') this.ended = true
    const at = Math.max(performance.now() + this.oneWayMs, this.notBefore, this.last)
    this.last = at
    this.queue.push(kind === 'data' ? { at, kind, bytes: bytes! } : { at, kind })
    if (bytes) {
      this.queuedBytes += bytes.length
      if (this.queuedBytes > MAX_IN_FLIGHT_BYTES) this.source.pause()
    }
    this.schedule()
  }

  stop(): void {
    this.stopped = true
    clearTimeout(this.timer)
    this.queue.length = 0
  }

  private schedule(): void {
    if (this.timer || this.blocked || !this.dest || this.stopped) return
    const head = this.queue[0]
    if (!head) return
    // A timer may fire a fraction of a ms early: pump() re-arms until the head is due, so nothing
    // is ever delivered before its time.
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.pump()
    }, Math.max(0, Math.ceil(head.at - performance.now())))
  }

  private pump(): void {
    const dest = this.dest
    if (!dest || this.stopped) return
    const now = performance.now()
    while (this.queue.length > 0 && this.queue[0]!.at <= now && !this.blocked) {
      const item = this.queue.shift()!
      if (item.kind === 'destroy') {
        this.stop()
        // After an end this was a graceful close: the FIN follows the data, which a destroy could
        // still drop from the socket's buffer. Without one it was a reset, passed on as one.
        if (!dest.writableEnded) dest.resetAndDestroy()
        return
      }
      if (item.kind === 'end') {
        dest.end()
        continue
      }
      this.queuedBytes -= item.bytes.length
      this.onDeliver(item.bytes.length)
      if (!dest.write(item.bytes)) this.blocked = true
      if (this.queuedBytes <= MAX_IN_FLIGHT_BYTES / 4 && this.source.isPaused()) this.source.resume()
    }
    this.schedule()
  }
}

export async function startWanRelay(opts: WanRelayOptions): Promise<WanRelay> {
  const rtt = opts.rttMs
  const half = rtt / 2
  const stats: WanRelayStats = { connections: 0, open: 0, bytesUp: 0, bytesDown: 0 }
  const sockets = new Set<net.Socket>()
  const timers = new Set<NodeJS.Timeout>()
  const lines = new Set<DelayLine>()
  const line = (notBefore: number, source: net.Socket, onDeliver: (n: number) => void) => {
    const l = new DelayLine(half, notBefore, source, onDeliver)
    lines.add(l)
    return l
  }
  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t)
      fn()
    }, ms)
    timers.add(t)
  }
  const track = (s: net.Socket) => {
    sockets.add(s)
    // 'close' follows every error; the close handlers below do the work.
    s.on('error', () => {})
    s.once('close', () => sockets.delete(s))
  }

  // allowHalfOpen: a client's FIN must not end the relay's side towards it before the target's
  // answer (and FIN) have crossed the link.
  const server = net.createServer({ noDelay: true, allowHalfOpen: true }, (client) => {
    const t0 = performance.now()
    stats.connections++
    stats.open++
    track(client)
    const up = line(t0 + 1.5 * rtt, client, (n) => (stats.bytesUp += n))
    let upstream: net.Socket | undefined
    let down: DelayLine | undefined
    let finished = false
    /** Both sockets gone: nothing can be delivered any more. */
    const finish = () => {
      if (finished || !client.destroyed || (upstream && !upstream.destroyed)) return
      finished = true
      stats.open--
      for (const l of [up, down]) {
        l?.stop()
        if (l) lines.delete(l)
      }
    }
    client.on('data', (bytes: Buffer) => up.push('data', bytes))
    client.on('end', () => up.push('end'))
    client.once('close', () => {
      // A client that closed or reset: the target hears of it RTT/2 later.
      if (upstream) up.push('destroy')
      finish()
    })

    later(half, () => {
      if (client.destroyed) return finish()
      const sock = net.connect({ host: opts.target.host, port: opts.target.port, noDelay: true, allowHalfOpen: true })
      upstream = sock
      track(sock)
      let connected = false
      const line2 = line(t0 + 2 * rtt, sock, (n) => (stats.bytesDown += n))
      down = line2
      line2.attach(client)
      sock.on('connect', () => {
        connected = true
        up.attach(sock)
      })
      sock.on('data', (bytes: Buffer) => line2.push('data', bytes))
      sock.on('end', () => line2.push('end'))
      sock.once('close', () => {
        // Refused before it connected: the RST reaches the client RTT/2 later, as would any reset
        // or close after it.
        if (!connected) {
          up.stop()
          later(half, () => client.resetAndDestroy())
        } else line2.push('destroy')
        finish()
      })
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(opts.port ?? 0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    rttMs: rtt,
    stats: () => ({ ...stats }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t)
        timers.clear()
        for (const l of lines) l.stop()
        lines.clear()
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  }
}
