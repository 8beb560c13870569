/**
 * `npm run keys -- create|list|revoke …` against Upstash REST (UPSTASH_REDIS_REST_URL and
 * UPSTASH_REDIS_REST_TOKEN); with both unset, the local bridge (`npm run upstash-bridge`) and its
 * dev token.
 */
import { Redis } from '@upstash/redis'
import { DEFAULT_BRIDGE_HOST, DEFAULT_BRIDGE_PORT, DEV_UPSTASH_TOKEN } from '../local/upstash-bridge.ts'
import { runKeysCommand } from './keys-command.ts'

function connect(): Redis {
  let url = process.env.UPSTASH_REDIS_REST_URL
  let token = process.env.UPSTASH_REDIS_REST_TOKEN
  if (url && !token) {
    console.error('keys: UPSTASH_REDIS_REST_URL is set but UPSTASH_REDIS_REST_TOKEN is not')
    process.exit(2)
  }
  if (!url) {
    url = `http://${DEFAULT_BRIDGE_HOST}:${DEFAULT_BRIDGE_PORT}`
    token ??= DEV_UPSTASH_TOKEN
    console.error(`keys: UPSTASH_REDIS_REST_URL unset; using the local bridge at ${url}${process.env.UPSTASH_REDIS_REST_TOKEN ? '' : ' with the dev token'}`)
  }
  // Strings back exactly as stored; fail in about a second when nothing answers.
  return new Redis({ url, token, automaticDeserialization: false, enableTelemetry: false, retry: { retries: 1, backoff: () => 200 } })
}

const url = process.env.UPSTASH_REDIS_REST_URL ?? `http://${DEFAULT_BRIDGE_HOST}:${DEFAULT_BRIDGE_PORT}`
const code = await runKeysCommand(process.argv.slice(2), connect(), {
  out: (line) => console.log(line),
  err: (line) => console.error(line.replace(/^keys: fetch failed$/, `keys: cannot reach ${url} (for local use: npm run upstash-bridge)`)),
})
process.exit(code)
