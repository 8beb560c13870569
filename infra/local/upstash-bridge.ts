/**
 * A dev/test-only Upstash REST server in front of a real redis-server, so the unmodified
 * @upstash/redis and @upstash/ratelimit clients run locally (FACTS.md "Upstash"). Routes:
 *
 * - `POST /`            one command (JSON array) → 200 `{ result }` | 400 `{ error }`
 * - `POST /pipeline`    array of commands → 200 `[{ result } | { error }, …]` (one connection, in order)
 * - `POST /multi-exec`  the same inside MULTI … EXEC → 200 entries | 400 `{ error }` when the
 *                       transaction was aborted (EXECABORT: a command failed to queue)
 * - `GET /healthz`      200 when redis answers PING, else 503 (no token needed; for supervisors)
 *
 * Every other request needs `Authorization: Bearer <token>` (401 otherwise). Responses carry an
 * `upstash-sync-token` (the client echoes it for read-your-writes; one redis needs no more).
 * Never logs tokens, keys or values.
 */
import http from 'node:http'
import { createHash, timingSafeEqual } from 'node:crypto'
import type net from 'node:net'
import { parseRedisUrl, redactRedisUrl, RespPool } from './redis-client.ts'
import { RedisError, type RespArg, type RespReply } from './resp-codec.ts'
import { ScriptRewriter } from './script-rewrite.ts'
import { parseUpstashCommand, refusalFor, toUpstashEntry, type UpstashEncoding, type UpstashEntry } from './upstash-protocol.ts'

export const DEFAULT_BRIDGE_HOST = '127.0.0.1'
export const DEFAULT_BRIDGE_PORT = 8079
export const DEFAULT_BRIDGE_REDIS_URL = 'redis://127.0.0.1:6380'
export const DEV_UPSTASH_TOKEN = 'zl-dev-upstash-token'

export interface UpstashBridgeOptions {
  /** The bearer token clients must send. */
  token: string
  host?: string
  /** 0 picks a free port. */
  port?: number
  redisUrl?: string
  /** Redis connections shared by all requests, used round-robin. */
  redisConnections?: number
  maxBodyBytes?: number
  /** Where the start line and redis outage lines go; default console.log. */
  log?: (line: string) => void
}

export interface UpstashBridge {
  /** `http://host:port`, what UPSTASH_REDIS_REST_URL should be. */
  url: string
  host: string
  port: number
  close(): Promise<void>
}

type Route = 'command' | 'pipeline' | 'multi-exec'
const ROUTES: Record<string, Route> = { '/': 'command', '/pipeline': 'pipeline', '/multi-exec': 'multi-exec' }

class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message)
  }
}

export async function startUpstashBridge(options: UpstashBridgeOptions): Promise<UpstashBridge> {
  if (!options.token) throw new Error('upstash-bridge: a token is required')
  const host = options.host ?? DEFAULT_BRIDGE_HOST
  const redisUrl = options.redisUrl ?? DEFAULT_BRIDGE_REDIS_URL
  const log = options.log ?? ((line: string) => console.log(line))
  const pool = new RespPool(parseRedisUrl(redisUrl), options.redisConnections ?? 4)
  const scripts = new ScriptRewriter()
  const tokenDigest = sha256(`Bearer ${options.token}`)
  const maxBodyBytes = options.maxBodyBytes ?? 64 * 1024 * 1024
  let syncToken = 0
  let redisDown = false

  /** Sends commands on one connection, in one write, with scripts rewritten for Redis 7.0. */
  async function execute(commands: RespArg[][]): Promise<RespReply[]> {
    try {
      const replies = await pool.sendBatch(commands.map((c) => scripts.rewrite(c)))
      if (redisDown) log('upstash-bridge: redis reachable again')
      redisDown = false
      return replies
    } catch (err) {
      if (!redisDown) log(`upstash-bridge: redis unavailable (${(err as Error).message})`)
      redisDown = true
      throw new HttpError(500, `ERR redis unavailable: ${(err as Error).message}`)
    }
  }

  /** SCRIPT LOAD of a rewritten script answers the sha the client computed, not Redis's. */
  function restoreShas(commands: RespArg[][], replies: RespReply[]): RespReply[] {
    return replies.map((reply, i) => {
      const originalSha = scripts.originalShaFor(commands[i])
      return originalSha && Buffer.isBuffer(reply) ? Buffer.from(originalSha) : reply
    })
  }

  async function runPipeline(commands: RespArg[][]): Promise<RespReply[]> {
    const refusals = commands.map(refusalFor)
    const allowed = commands.filter((_, i) => !refusals[i])
    const replies = restoreShas(allowed, allowed.length > 0 ? await execute(allowed) : [])
    let next = 0
    return refusals.map((refusal) => (refusal ? new RedisError(refusal) : replies[next++]))
  }

  async function runTransaction(commands: RespArg[][]): Promise<RespReply[]> {
    const refusal = commands.map(refusalFor).find(Boolean)
    if (refusal) throw new HttpError(400, refusal)
    const replies = await execute([['MULTI'], ...commands, ['EXEC']])
    const exec = replies[replies.length - 1]
    if (exec instanceof RedisError) throw new HttpError(400, exec.message)
    if (!Array.isArray(exec)) throw new HttpError(400, 'ERR transaction aborted')
    return restoreShas(commands, exec)
  }

  async function handle(route: Route, body: unknown, encoding: UpstashEncoding): Promise<[number, unknown]> {
    if (route === 'command') {
      const [reply] = await runPipeline([parseOrThrow(body)])
      const entry = toUpstashEntry(reply, encoding)
      return ['error' in entry ? 400 : 200, entry]
    }
    if (!Array.isArray(body) || body.length === 0) throw new HttpError(400, `ERR ${route} body must be a non-empty array of commands`)
    const commands = body.map(parseOrThrow)
    const replies = route === 'pipeline' ? await runPipeline(commands) : await runTransaction(commands)
    return [200, replies.map((r): UpstashEntry => toUpstashEntry(r, encoding))]
  }

  const server = http.createServer((req, res) => {
    const send = (status: number, payload: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json', 'upstash-sync-token': String(++syncToken) })
      res.end(JSON.stringify(payload))
    }
    const path = (req.url ?? '/').split('?')[0]
    if (req.method === 'GET' && path === '/healthz') {
      pool.send(['PING']).then(
        (reply) => send(reply === 'PONG' ? 200 : 503, { result: reply === 'PONG' ? 'ok' : 'redis not ready' }),
        () => send(503, { error: 'redis unavailable' }),
      )
      return
    }
    if (!isAuthorized(req.headers.authorization, tokenDigest)) return send(401, { error: 'Unauthorized' })
    const route = ROUTES[path.replace(/(.)\/$/, '$1')]
    if (!route) return send(404, { error: `ERR unknown endpoint ${path}` })
    if (req.method !== 'POST') return send(405, { error: 'ERR use POST' })
    const encoding: UpstashEncoding = String(req.headers['upstash-encoding'] ?? '').toLowerCase() === 'base64' ? 'base64' : 'utf8'
    readJson(req, maxBodyBytes)
      .then((body) => handle(route, body, encoding))
      .then(([status, payload]) => send(status, payload))
      .catch((err: unknown) => {
        if (err instanceof HttpError) return send(err.status, { error: err.message })
        log(`upstash-bridge: internal error (${(err as Error).name})`)
        send(500, { error: 'ERR internal bridge error' })
      })
  })
  // Longer than any client's idle keep-alive, so a reused socket is never closed under a request.
  server.keepAliveTimeout = 65_000

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new Error(`upstash-bridge: ${host}:${options.port} is already in use`) : err))
    server.listen(options.port ?? DEFAULT_BRIDGE_PORT, host, () => resolve())
  })
  const { port } = server.address() as net.AddressInfo
  const url = `http://${host}:${port}`
  log(`upstash-bridge: ${url} → ${redactRedisUrl(redisUrl)} (Upstash REST for dev and tests only)`)

  let closed: Promise<void> | undefined
  return {
    url,
    host,
    port,
    close: () => (closed ??= new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
      pool.close()
    })),
  }
}

function parseOrThrow(value: unknown): RespArg[] {
  const parsed = parseUpstashCommand(value)
  if (typeof parsed === 'string') throw new HttpError(400, parsed)
  return parsed
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest()
}

/** Constant-time comparison of the whole header (digests make the lengths equal). */
function isAuthorized(header: string | undefined, expectedDigest: Buffer): boolean {
  return header !== undefined && timingSafeEqual(sha256(header.trim()), expectedDigest)
}

function readJson(req: http.IncomingMessage, maxBytes: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size > maxBytes) {
        reject(new HttpError(413, `ERR request body larger than ${maxBytes} bytes`))
        req.removeAllListeners('data')
        req.resume() // drain the rest unread so the 413 can still be written
        return
      }
      chunks.push(chunk)
    })
    req.on('error', reject)
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')))
      } catch {
        reject(new HttpError(400, 'ERR request body is not valid JSON'))
      }
    })
  })
}
