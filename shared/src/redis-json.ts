/**
 * A JSON value read back from Redis: @upstash/redis hands back the parsed JSON, a raw client the
 * string. Either way `schema` checks it; a string that is not JSON fails the check (undefined).
 */
import { z } from 'zod'

export function redisJson<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => {
    if (typeof v !== 'string') return v
    try {
      return JSON.parse(v)
    } catch {
      return undefined
    }
  }, schema)
}
