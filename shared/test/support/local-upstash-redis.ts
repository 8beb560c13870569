import { Redis } from '@upstash/redis'
import { afterAll, beforeAll } from 'vitest'
import { startLocalUpstash, type LocalUpstash } from '../../../infra/local/local-upstash.ts'

/**
 * A real redis-server behind the local Upstash REST bridge for the calling test file, started
 * before its tests and stopped after, with the real @upstash/redis client on it.
 */
export function useLocalUpstashRedis(): { readonly redis: Redis; readonly upstash: LocalUpstash } {
  let upstash: LocalUpstash | undefined
  let redis: Redis | undefined
  beforeAll(async () => {
    upstash = await startLocalUpstash()
    redis = new Redis({ url: upstash.restUrl, token: upstash.restToken, enableTelemetry: false })
  })
  afterAll(async () => {
    await upstash?.stop()
  })
  return {
    get redis() {
      if (!redis) throw new Error('the local Upstash is not started yet (use it inside a test)')
      return redis
    },
    get upstash() {
      if (!upstash) throw new Error('the local Upstash is not started yet (use it inside a test)')
      return upstash
    },
  }
}
