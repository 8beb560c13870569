/**
 * redis-server on a free port plus the Upstash bridge in front of it: what a test file (or any
 * tool that needs a throwaway Upstash) starts in one call.
 */
import { startRedis, type RedisProcess } from './redis-process.ts'
import { DEV_UPSTASH_TOKEN, startUpstashBridge, type UpstashBridge } from './upstash-bridge.ts'

export interface LocalUpstash {
  /** UPSTASH_REDIS_REST_URL. */
  restUrl: string
  /** UPSTASH_REDIS_REST_TOKEN. */
  restToken: string
  redis: RedisProcess
  bridge: UpstashBridge
  stop(): Promise<void>
}

export async function startLocalUpstash(options: { token?: string; log?: (line: string) => void } = {}): Promise<LocalUpstash> {
  const restToken = options.token ?? DEV_UPSTASH_TOKEN
  const redis = await startRedis({ port: 0 })
  let bridge: UpstashBridge
  try {
    bridge = await startUpstashBridge({ token: restToken, port: 0, redisUrl: redis.url, log: options.log ?? (() => {}) })
  } catch (err) {
    await redis.stop()
    throw err
  }
  return {
    restUrl: bridge.url,
    restToken,
    redis,
    bridge,
    stop: async () => {
      await bridge.close()
      await redis.stop()
    },
  }
}
