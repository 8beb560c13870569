/**
 * RESP2, the Redis wire protocol: command encoding and an incremental reply parser.
 * Binary-safe: bulk strings stay Buffers; simple strings (status replies such as OK, PONG) are
 * strings; errors are `RedisError` values, never thrown, so one failed command in a pipeline does
 * not hide the replies around it.
 */

export class RedisError extends Error {
  override name = 'RedisError'
}

/** A decoded reply: status → string, bulk → Buffer, integer → number, nil → null. */
export type RespReply = string | Buffer | number | null | RedisError | RespReply[]

/** One command argument as it goes on the wire. */
export type RespArg = string | Buffer

const CRLF = Buffer.from('\r\n')

/** `*N\r\n$len\r\narg\r\n…` for one command. */
export function encodeCommand(args: readonly RespArg[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)]
  for (const arg of args) {
    const bytes = typeof arg === 'string' ? Buffer.from(arg, 'utf8') : arg
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, CRLF)
  }
  return Buffer.concat(parts)
}

/** Thrown inside the parser when the buffer ends mid-reply; `needBytes` is a lower bound on the total. */
class Incomplete {
  constructor(readonly needBytes: number) {}
}

/**
 * Parses replies out of a byte stream that arrives in chunks. Bytes are only concatenated once
 * enough have arrived for the reply that stopped the last attempt (a large bulk string is not
 * re-parsed for every chunk).
 */
export class RespParser {
  private chunks: Buffer[] = []
  private buffered = 0
  private needBytes = 0

  /** Feeds bytes; returns every reply completed by them, in order. */
  push(chunk: Buffer): RespReply[] {
    this.chunks.push(chunk)
    this.buffered += chunk.length
    if (this.buffered < this.needBytes) return []
    const buf = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks)
    const replies: RespReply[] = []
    let offset = 0
    while (offset < buf.length) {
      try {
        const [reply, next] = parseReply(buf, offset)
        replies.push(reply)
        offset = next
      } catch (err) {
        if (!(err instanceof Incomplete)) throw err
        this.needBytes = err.needBytes - offset
        break
      }
    }
    const rest = buf.subarray(offset)
    this.chunks = rest.length > 0 ? [rest] : []
    this.buffered = rest.length
    if (rest.length === 0) this.needBytes = 0
    return replies
  }
}

/** Parses one reply at `offset`; returns it and the offset after it. Throws `Incomplete`. */
function parseReply(buf: Buffer, offset: number): [RespReply, number] {
  const lineEnd = buf.indexOf(CRLF, offset)
  if (lineEnd === -1) throw new Incomplete(buf.length + 1)
  const type = buf[offset]
  const line = buf.toString('utf8', offset + 1, lineEnd)
  const next = lineEnd + 2
  switch (type) {
    case 0x2b: // '+'
      return [line, next]
    case 0x2d: // '-'
      return [new RedisError(line), next]
    case 0x3a: // ':'
      return [Number(line), next]
    case 0x24: { // '$'
      const len = Number(line)
      if (len < 0) return [null, next]
      const end = next + len
      if (buf.length < end + 2) throw new Incomplete(end + 2)
      return [Buffer.from(buf.subarray(next, end)), end + 2]
    }
    case 0x2a: { // '*'
      const count = Number(line)
      if (count < 0) return [null, next]
      const items: RespReply[] = []
      let at = next
      for (let i = 0; i < count; i++) {
        const [item, after] = parseReply(buf, at)
        items.push(item)
        at = after
      }
      return [items, at]
    }
    default:
      throw new Error(`RESP protocol error: unexpected type byte 0x${(type ?? 0).toString(16)}`)
  }
}
