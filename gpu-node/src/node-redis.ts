/**
 * The node's Upstash Redis client (registry heartbeat, response store): no retry storm (a beat
 * retries on the next tick; a request's store call fails fast and says so), no telemetry, and a
 * bounded time per call.
 */
import { Redis } from '@upstash/redis'

export function createNodeRedis(upstash: { url: string; token: string }, timeoutMs: number): Redis {
  return new Redis({
    url: upstash.url,
    token: upstash.token,
    retry: false,
    enableTelemetry: false,
    enableAutoPipelining: false,
    signal: () => AbortSignal.timeout(timeoutMs),
  })
}
