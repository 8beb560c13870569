/**
 * The real app (createApp, the three real dialects) over in-memory dependencies, for tests of
 * the request path before a node: one known API key, a static one-node registry, a stand-in
 * upstream answering 200, and whatever limiter the test hands in. Key lookups and upstream
 * calls are counted, so a test can show that a refusal cost neither.
 */
import { hashApiKey } from '../../../shared/src/api-key.ts'
import { createApp } from '../../src/app.ts'
import { parseEdgeConfig } from '../../src/config.ts'
import type { KeyStore } from '../../src/keys/key-store.ts'
import { createMemoryKeyStore } from './memory-key-store.ts'
import type { RateLimiter } from '../../src/limits/rate-limiter.ts'
import type { RoutableNode } from '../../src/routing/pick-node.ts'

export const TEST_KEY = 'zl-0123456789abcdefghijklmnopqrstuv'
export const CHAT = '/v1/chat/completions'
export const MESSAGES = '/v1/messages'
export const chatBody = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }
export const messagesBody = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }

const NODE: RoutableNode = { id: 'n1', url: 'http://node.test', region: 'local', lat: 0, lon: 0, models: ['tiny'], maxBatch: 8, running: 0, waiting: 0, kvUsedFrac: 0, tokPerSec: 100, draining: false, source: 'static' }

export interface AppHarnessOptions {
  limiter: RateLimiter
  /** The key's id: the limiter's identifier (tests on a shared Redis need their own). */
  keyId?: string
  /** The key's limits (0: the config defaults). */
  rpm?: number
  tpm?: number
  now?: () => number
  /** Replaces the in-memory key store (it is still counted). */
  keys?: KeyStore
}

export async function appHarness(opts: AppHarnessOptions) {
  const config = parseEdgeConfig({ UPSTASH_REDIS_REST_URL: 'http://redis.test', UPSTASH_REDIS_REST_TOKEN: 't', EDGE_SHARED_SECRET: 'zl-test-edge-secret-0123456789', REQUEST_LOG: '0' })
  const records = new Map([[await hashApiKey(TEST_KEY), { id: opts.keyId ?? 'k1', tenant: 't1', name: '', rpm: opts.rpm ?? 60, tpm: opts.tpm ?? 100_000, models: ['*'], created: 0, disabled: false }]])
  const store = opts.keys ?? createMemoryKeyStore(records)
  const counts = { keyLookups: 0, upstreamCalls: 0 }
  const app = createApp({
    config,
    keys: { lookup: (h) => (counts.keyLookups++, store.lookup(h)) },
    limiter: opts.limiter,
    registry: { table: async () => ({ nodes: [NODE], source: 'static', fetchedAtMs: Date.now() }), markDown: () => {} },
    upstream: async () => (counts.upstreamCalls++, Response.json({ ok: true })),
    ...(opts.now ? { now: opts.now } : {}),
  })
  return {
    counts,
    /** POSTs `body` (a string as is, anything else as JSON) with the test key and these headers. */
    post(path: string, body: unknown, headers: Record<string, string> = { 'content-type': 'application/json' }) {
      return app.request(path, { method: 'POST', headers: { authorization: `Bearer ${TEST_KEY}`, ...headers }, body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) })
    },
  }
}
