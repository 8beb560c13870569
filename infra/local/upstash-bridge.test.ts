import { createHash } from 'node:crypto'
import { Redis } from '@upstash/redis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from './local-upstash.ts'
import { RespConnection } from './redis-client.ts'
import { startRedis } from './redis-process.ts'
import { startUpstashBridge } from './upstash-bridge.ts'

let up: LocalUpstash
/** The default client: base64 responses, auto-pipelining, read-your-writes. */
let redis: Redis
/** One HTTP request per command (`POST /`). */
let direct: Redis

beforeAll(async () => {
  up = await startLocalUpstash()
  redis = new Redis({ url: up.restUrl, token: up.restToken, enableTelemetry: false })
  direct = new Redis({ url: up.restUrl, token: up.restToken, enableTelemetry: false, enableAutoPipelining: false })
})
afterAll(async () => {
  await up?.stop()
})

function rest(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${up.restUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${up.restToken}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  })
}

const TRICKY_STRINGS = ['abcd', 'T0s=', 'OK', 'héllo wörld 🌍 漢字', '', '  spaced  ', '{"not":"parsed"']

describe('@upstash/redis through the bridge', () => {
  it.each([['auto-pipelined', () => redis], ['single-command', () => direct]])('round-trips strings that look like base64, OK and unicode (%s)', async (_, client) => {
    for (const [i, value] of TRICKY_STRINGS.entries()) {
      expect(await client().set(`s:${i}`, value)).toBe('OK')
      expect(await client().get(`s:${i}`)).toBe(value)
    }
  })

  it('round-trips numbers and JSON values the way the client serializes them', async () => {
    await redis.set('n', 42)
    expect(await redis.get('n')).toBe(42)
    expect(await redis.incrby('n', 8)).toBe(50)
    await redis.set('obj', { a: [1, 'b'], c: 'abcd' })
    expect(await redis.get('obj')).toEqual({ a: [1, 'b'], c: 'abcd' })
    expect(await redis.get('missing')).toBeNull()
    expect(await redis.type('n')).toBe('string')
  })

  it('writes and reads hashes', async () => {
    expect(await redis.hset('h', { f1: 'abcd', f2: 'é', f3: 7 })).toBe(3)
    expect(await redis.hgetall('h')).toEqual({ f1: 'abcd', f2: 'é', f3: 7 })
    expect(await redis.hget('h', 'f1')).toBe('abcd')
    expect(await redis.hgetall('no-such-hash')).toBeNull()
  })

  it('runs an explicit pipeline and keeps per-command errors apart', async () => {
    const results = await redis.pipeline().set('p1', 'abcd').get('p1').hset('p2', { a: 'OK' }).hgetall('p2').incr('p1').exec({ keepErrors: true })
    expect(results.map((r) => r.result).slice(0, 4)).toEqual(['OK', 'abcd', 1, { a: 'OK' }])
    expect(results[4].error).toMatch(/not an integer/)
    await expect(redis.pipeline().set('p3', 'x').incr('p3').exec()).rejects.toThrow(/Command 2 \[ incr \] failed: ERR value is not an integer/)
  })

  it('runs MULTI/EXEC transactions and reports an aborted one', async () => {
    expect(await redis.multi().set('m', 1).incr('m').get('m').lrange('none', 0, -1).exec()).toEqual(['OK', 2, 2, []])
    // Wrong arity fails while queueing → EXECABORT → the whole transaction is an error.
    const res = await rest('/multi-exec', [['set', 'm', '5'], ['get']])
    expect(res.status).toBe(400)
    expect(((await res.json()) as { error: string }).error).toMatch(/EXECABORT/)
    expect(await redis.get('m')).toBe(2)
  })

  it('auto-pipelines concurrent commands into a few HTTP requests', async () => {
    const before = (redis as unknown as { pipelineCounter: number }).pipelineCounter
    const keys = Array.from({ length: 20 }, (_, i) => `ap:${i}`)
    await Promise.all(keys.map((k, i) => redis.set(k, `v${i}`)))
    const values = await Promise.all(keys.map((k) => redis.get(k)))
    expect(values).toEqual(keys.map((_, i) => `v${i}`))
    const pipelines = (redis as unknown as { pipelineCounter: number }).pipelineCounter - before
    expect(pipelines).toBeGreaterThanOrEqual(2)
    expect(pipelines).toBeLessThanOrEqual(4)
  })

  it('turns a failing command into the library error, auto-pipelined and single', async () => {
    await redis.set('str', 'abc')
    await expect(redis.incr('str')).rejects.toThrow('Command failed: ERR value is not an integer or out of range')
    await expect(direct.incr('str')).rejects.toThrow(/^ERR value is not an integer or out of range, command was: \["incr","str"\]/)
    await expect(redis.lpush('str', 'x')).rejects.toThrow(/WRONGTYPE/)
  })

  it('refuses a wrong token with 401 and the client throws', async () => {
    const wrong = new Redis({ url: up.restUrl, token: 'not-the-token', enableTelemetry: false, retry: false })
    await expect(wrong.get('n')).rejects.toThrow(/Unauthorized/)
    const res = await fetch(`${up.restUrl}/`, { method: 'POST', body: '["ping"]' })
    expect(res.status).toBe(401)
  })

  it('speaks the wire protocol: 400 single errors, raw OK, base64 strings, sync token', async () => {
    const failed = await rest('/', ['incr', 'str'])
    expect(failed.status).toBe(400)
    expect(await failed.json()).toEqual({ error: 'ERR value is not an integer or out of range' })
    expect(failed.headers.get('upstash-sync-token')).toMatch(/^\d+$/)

    const b64 = await rest('/pipeline', [['set', 'w', 'OK'], ['get', 'w'], ['ping'], ['mget', 'w', 'nope'], ['incr', 'cnt']], { 'upstash-encoding': 'base64' })
    expect(await b64.json()).toEqual([{ result: 'OK' }, { result: 'T0s=' }, { result: 'UE9ORw==' }, { result: ['T0s=', null] }, { result: 1 }])
    const plain = await rest('/pipeline', [['get', 'w'], ['ping'], ['subscribe', 'c']])
    expect(await plain.json()).toEqual([{ result: 'OK' }, { result: 'PONG' }, { error: expect.stringMatching(/not supported by the local Upstash bridge/) }])

    expect((await rest('/', 'not a command')).status).toBe(400)
    expect((await rest('/pipeline', [])).status).toBe(400)
    expect((await rest('/nope', ['ping'])).status).toBe(404)
  })

  it('is binary-safe: bytes that are not UTF-8 come back exactly as base64', async () => {
    const conn = await RespConnection.connect({ host: '127.0.0.1', port: up.redis.port })
    await conn.send(['SET', 'bin', Buffer.from([0xff, 0x00, 0x80, 0x0d, 0x0a])])
    conn.close()
    const res = await rest('/', ['get', 'bin'], { 'upstash-encoding': 'base64' })
    expect(Buffer.from(((await res.json()) as { result: string }).result, 'base64')).toEqual(Buffer.from([0xff, 0x00, 0x80, 0x0d, 0x0a]))
  })

  it('loads Upstash-flagged scripts and runs them by the sha the client computed', async () => {
    const script = '#!lua flags=allow-key-locking\nreturn redis.call("INCRBY", KEYS[1], ARGV[1])'
    const sha = createHash('sha1').update(script).digest('hex')
    expect(await direct.scriptLoad(script)).toBe(sha)
    expect(await direct.scriptExists(sha)).toEqual([1])
    expect(await direct.evalsha(sha, ['lua'], [3])).toBe(3)
    expect(await redis.eval(script, ['lua'], [4])).toBe(7)
  })

  it('answers /healthz without a token', async () => {
    const res = await fetch(`${up.restUrl}/healthz`)
    expect(res.status).toBe(200)
  })

  it('measures the GET round trip through the default client', async () => {
    await redis.set('lat', 'abcd')
    const samples: number[] = []
    for (let i = 0; i < 200; i++) {
      const t0 = performance.now()
      await redis.get('lat')
      samples.push(performance.now() - t0)
    }
    samples.sort((a, b) => a - b)
    const p50 = samples[100]
    console.log(`bridge GET via @upstash/redis: p50 ${p50.toFixed(2)} ms, p99 ${samples[198].toFixed(2)} ms (200 sequential)`)
    expect(p50).toBeLessThan(50)
  })

  it('answers 500 while redis is down and recovers when it is back on the same port', async () => {
    const first = await startRedis({ port: 0 })
    const lines: string[] = []
    const bridge = await startUpstashBridge({ token: 't', port: 0, redisUrl: first.url, log: (l) => lines.push(l) })
    const client = new Redis({ url: bridge.url, token: 't', enableTelemetry: false, retry: false })
    try {
      expect(await client.set('k', 'v')).toBe('OK')
      await first.stop()
      await expect(client.get('k')).rejects.toThrow(/redis unavailable/)
      expect((await fetch(`${bridge.url}/healthz`)).status).toBe(503)
      const second = await startRedis({ port: first.port })
      try {
        expect(await client.get('k')).toBeNull() // no persistence: a fresh, empty redis
        expect(await client.set('k', 'again')).toBe('OK')
      } finally {
        await second.stop()
      }
      expect(lines.some((l) => l.includes('redis unavailable'))).toBe(true)
      expect(lines.some((l) => l.includes('reachable again'))).toBe(true)
      expect(lines.join('\n')).not.toMatch(/again"|"v"|Bearer|\bt\b/)
    } finally {
      await bridge.close()
    }
  })
})
