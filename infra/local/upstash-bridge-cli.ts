/**
 * `npm run upstash-bridge`: the local Upstash REST bridge in the foreground (DESIGN.md §9).
 * Env: BRIDGE_HOST (127.0.0.1), BRIDGE_PORT (8079), REDIS_URL (redis://127.0.0.1:6380),
 * UPSTASH_TOKEN (zl-dev-upstash-token). When nothing answers at a loopback REDIS_URL, it starts
 * redis-server there itself and stops it on exit.
 */
import { z } from 'zod'
import { parseRedisUrl, RespConnection } from './redis-client.ts'
import { startRedis, type RedisProcess } from './redis-process.ts'
import {
  DEFAULT_BRIDGE_HOST, DEFAULT_BRIDGE_PORT, DEFAULT_BRIDGE_REDIS_URL, DEV_UPSTASH_TOKEN, startUpstashBridge,
} from './upstash-bridge.ts'

const BridgeEnv = z.object({
  BRIDGE_HOST: z.string().min(1).default(DEFAULT_BRIDGE_HOST),
  BRIDGE_PORT: z.coerce.number().int().min(0).max(65535).default(DEFAULT_BRIDGE_PORT),
  REDIS_URL: z.string().startsWith('redis://').default(DEFAULT_BRIDGE_REDIS_URL),
  UPSTASH_TOKEN: z.string().min(1).default(DEV_UPSTASH_TOKEN),
})
type BridgeEnv = z.infer<typeof BridgeEnv>

async function redisAnswers(url: string): Promise<boolean> {
  try {
    const conn = await RespConnection.connect(parseRedisUrl(url), 1000)
    const reply = await conn.send(['PING'])
    conn.close()
    return reply === 'PONG'
  } catch {
    return false
  }
}

async function main(): Promise<void> {
  const parsed = BridgeEnv.safeParse(process.env)
  if (!parsed.success) {
    console.error(`upstash-bridge: bad environment: ${z.prettifyError(parsed.error)}`)
    process.exit(2)
  }
  const env: BridgeEnv = parsed.data
  let redis: RedisProcess | undefined
  if (!(await redisAnswers(env.REDIS_URL))) {
    const { host, port } = parseRedisUrl(env.REDIS_URL)
    if (!['127.0.0.1', 'localhost', '::1'].includes(host)) {
      console.error(`upstash-bridge: nothing answers at ${host}:${port} (REDIS_URL); start redis there first`)
      process.exit(1)
    }
    redis = await startRedis({ host: host === 'localhost' ? '127.0.0.1' : host, port })
    console.log(`upstash-bridge: started redis-server on ${redis.host}:${redis.port} (pid ${redis.pid}, no persistence)`)
  }
  const bridge = await startUpstashBridge({
    token: env.UPSTASH_TOKEN, host: env.BRIDGE_HOST, port: env.BRIDGE_PORT, redisUrl: env.REDIS_URL,
  })
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await bridge.close()
    await redis?.stop()
    process.exit(0)
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
}

main().catch((err: Error) => {
  console.error(`upstash-bridge: ${err.message}`)
  process.exit(1)
})
