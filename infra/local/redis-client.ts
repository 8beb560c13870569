/**
 * A small RESP2 client for the local tools: pipelined connections and a round-robin pool.
 * Replies come back as values (`RedisError` included); only transport failures reject.
 */
import net from 'node:net'
import { encodeCommand, RespParser, type RespArg, type RespReply, RedisError } from './resp-codec.ts'

export interface RedisAddress {
  host: string
  port: number
  username?: string
  password?: string
  db?: number
}

/** `redis://[user:password@]host[:port][/db]` → address (port 6379 when absent). */
export function parseRedisUrl(url: string): RedisAddress {
  const u = new URL(url)
  if (u.protocol !== 'redis:') throw new Error(`unsupported Redis URL scheme ${u.protocol} (expected redis://)`)
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : undefined
  if (db !== undefined && !Number.isInteger(db)) throw new Error('Redis URL path must be a database number')
  return {
    host: u.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db,
  }
}

/** The URL without its password, for log lines. */
export function redactRedisUrl(url: string): string {
  const u = new URL(url)
  if (u.password) u.password = '***'
  return u.toString()
}

interface Pending {
  resolve: (reply: RespReply) => void
  reject: (err: Error) => void
}

/** One socket; commands are written at once and answered in order (RESP pipelining). */
export class RespConnection {
  private readonly parser = new RespParser()
  private readonly pending: Pending[] = []
  private closedFlag = false

  private constructor(private readonly socket: net.Socket) {
    socket.setNoDelay(true)
    socket.on('data', (chunk) => this.onData(chunk))
    socket.on('error', (err) => this.fail(err))
    socket.on('close', () => this.fail(new Error('redis connection closed')))
  }

  static async connect(address: RedisAddress, connectTimeoutMs = 2000): Promise<RespConnection> {
    const socket = net.connect({ host: address.host, port: address.port })
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        socket.destroy()
        reject(new Error(`redis at ${address.host}:${address.port}: no connection within ${connectTimeoutMs} ms`))
      }, connectTimeoutMs)
      socket.once('connect', () => { clearTimeout(timer); resolve() })
      socket.once('error', (err) => { clearTimeout(timer); reject(err) })
    })
    const conn = new RespConnection(socket)
    const setup: RespArg[][] = []
    if (address.password) setup.push(address.username ? ['AUTH', address.username, address.password] : ['AUTH', address.password])
    if (address.db) setup.push(['SELECT', String(address.db)])
    if (setup.length > 0) {
      const failed = (await conn.sendBatch(setup)).find((r) => r instanceof RedisError)
      if (failed) {
        conn.close()
        throw new Error(`redis connection setup failed: ${(failed as RedisError).message}`)
      }
    }
    return conn
  }

  get closed(): boolean {
    return this.closedFlag
  }

  /** Commands not yet answered. */
  get inFlight(): number {
    return this.pending.length
  }

  async send(args: readonly RespArg[]): Promise<RespReply> {
    const [reply] = await this.sendBatch([args])
    return reply
  }

  /**
   * Writes all commands in one write, so no other caller's command can land between them
   * (what makes MULTI … EXEC on a shared connection safe).
   */
  sendBatch(commands: readonly (readonly RespArg[])[]): Promise<RespReply[]> {
    if (this.closedFlag) return Promise.reject(new Error('redis connection closed'))
    const replies = commands.map(
      () => new Promise<RespReply>((resolve, reject) => this.pending.push({ resolve, reject })),
    )
    this.socket.write(Buffer.concat(commands.map(encodeCommand)))
    return Promise.all(replies)
  }

  close(): void {
    this.socket.end()
    this.fail(new Error('redis connection closed'))
  }

  private onData(chunk: Buffer): void {
    let replies: RespReply[]
    try {
      replies = this.parser.push(chunk)
    } catch (err) {
      this.socket.destroy()
      this.fail(err as Error)
      return
    }
    for (const reply of replies) this.pending.shift()?.resolve(reply)
  }

  private fail(err: Error): void {
    this.closedFlag = true
    for (const p of this.pending.splice(0)) p.reject(err)
  }
}

/** A few connections used round-robin, (re)connected lazily. */
export class RespPool {
  private readonly conns: (RespConnection | undefined)[]
  private readonly connecting: (Promise<RespConnection> | undefined)[]
  private cursor = 0
  private closedFlag = false

  constructor(private readonly address: RedisAddress, readonly size = 4) {
    this.conns = new Array(size).fill(undefined)
    this.connecting = new Array(size).fill(undefined)
  }

  async send(args: readonly RespArg[]): Promise<RespReply> {
    return (await this.acquire()).send(args)
  }

  async sendBatch(commands: readonly (readonly RespArg[])[]): Promise<RespReply[]> {
    return (await this.acquire()).sendBatch(commands)
  }

  close(): void {
    this.closedFlag = true
    for (const conn of this.conns) conn?.close()
    for (const pending of this.connecting) pending?.then((c) => c.close(), () => {})
  }

  private acquire(): Promise<RespConnection> {
    if (this.closedFlag) return Promise.reject(new Error('redis pool closed'))
    const i = this.cursor
    this.cursor = (this.cursor + 1) % this.size
    const conn = this.conns[i]
    if (conn && !conn.closed) return Promise.resolve(conn)
    this.connecting[i] ??= RespConnection.connect(this.address)
      .then((c) => {
        if (this.closedFlag) c.close()
        this.conns[i] = c
        return c
      })
      .finally(() => { this.connecting[i] = undefined })
    return this.connecting[i]
  }
}
