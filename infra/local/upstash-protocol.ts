/**
 * The data side of the Upstash REST protocol, as @upstash/redis 1.39 reads it
 * (node_modules/@upstash/redis, `HttpClient.request` and `decode`):
 *
 * - a command is a JSON array; the client sends strings, numbers and booleans (objects arrive
 *   already JSON-stringified);
 * - a reply is `{ result }` or `{ error }`; a pipeline or transaction answers an array of them;
 * - with `Upstash-Encoding: base64` (the client's default) the client base64-decodes EVERY string
 *   in a result, recursively through arrays, except a top-level string equal to "OK". So every
 *   string we send is base64 (bulk and status replies alike, nested "OK" included) except the
 *   top-level status reply OK, which real Upstash sends raw. Integers stay JSON numbers, nil null.
 */
import { RedisError, type RespArg, type RespReply } from './resp-codec.ts'

export type UpstashEncoding = 'base64' | 'utf8'
export type UpstashEntry = { result: unknown } | { error: string }

/** A wire command → Redis arguments, or a message saying why it is not one. */
export function parseUpstashCommand(value: unknown): RespArg[] | string {
  if (!Array.isArray(value) || value.length === 0) return 'ERR a command must be a non-empty JSON array'
  const args: string[] = []
  for (const item of value) {
    if (typeof item === 'string') args.push(item)
    else if (typeof item === 'number' || typeof item === 'boolean') args.push(String(item))
    else return 'ERR command arguments must be strings, numbers or booleans'
  }
  return args
}

/** Commands that would block or change the state of a pooled connection shared by all callers. */
const UNSUPPORTED = new Set([
  'subscribe', 'psubscribe', 'ssubscribe', 'unsubscribe', 'punsubscribe', 'sunsubscribe', 'monitor',
  'multi', 'exec', 'discard', 'watch', 'unwatch', 'select', 'hello', 'auth', 'quit', 'reset', 'client',
  'blpop', 'brpop', 'brpoplpush', 'blmove', 'blmpop', 'bzpopmin', 'bzpopmax', 'bzmpop', 'wait', 'waitaof',
  'shutdown', 'sync', 'psync', 'replicaof', 'slaveof', 'debug',
])

/** An error message when the bridge refuses `args`, undefined when it may be sent. */
export function refusalFor(args: readonly RespArg[]): string | undefined {
  const name = String(args[0]).toLowerCase()
  const blockingStream = (name === 'xread' || name === 'xreadgroup') && args.some((a) => String(a).toLowerCase() === 'block')
  if (!UNSUPPORTED.has(name) && !blockingStream) return undefined
  return `ERR '${name}' is not supported by the local Upstash bridge (it would block or change a shared connection)`
}

/** One Redis reply → one Upstash entry. */
export function toUpstashEntry(reply: RespReply, encoding: UpstashEncoding): UpstashEntry {
  if (reply instanceof RedisError) return { error: reply.message }
  if (encoding === 'base64' && reply === 'OK') return { result: 'OK' }
  return { result: toResult(reply, encoding) }
}

function toResult(reply: RespReply, encoding: UpstashEncoding): unknown {
  if (reply === null || typeof reply === 'number') return reply
  if (Array.isArray(reply)) return reply.map((r) => toResult(r, encoding))
  // Strings: bulk (Buffer), status (string) and, nested only, error replies (a Lua table may hold one).
  const bytes = Buffer.isBuffer(reply) ? reply : Buffer.from(reply instanceof RedisError ? reply.message : reply, 'utf8')
  return encoding === 'base64' ? bytes.toString('base64') : bytes.toString('utf8')
}
