/**
 * Helpers for edge tests running inside workerd: API keys written to the real Redis (through
 * the bridge), the stand-in fleet's control API, request bodies, and apps built from the same
 * bindings with overrides.
 */
import { Redis } from '@upstash/redis/cloudflare'
import { env } from 'cloudflare:workers'
import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test'
import { apiKeyRedisKey, generateApiKey, hashApiKey, toApiKeyFields } from '../../../shared/src/api-key.ts'
import { createApp } from '../../src/app.ts'
import type { EdgeDeps } from '../../src/deps.ts'
import { createWorkerDeps, type Env } from '../../src/entries/worker.ts'
import type { Mode, Received } from '../support/stand-in-node.ts'

export type TestEnv = Env & { TEST_CONTROL_URL: string; TEST_DEAD_URL: string; ADMIN_TOKEN: string; EDGE_SHARED_SECRET: string }
export const testEnv = env as unknown as TestEnv

export const MODEL = 'tiny'
export const REGION_COORDS = {
  'us-east': { lat: 39.0, lon: -77.5 },
  'eu-west': { lat: 53.3, lon: -6.3 },
  'ap-south': { lat: 19.1, lon: 72.9 },
} as const
export type RegionId = keyof typeof REGION_COORDS

export function testRedis(): Redis {
  return new Redis({ url: testEnv.UPSTASH_REDIS_REST_URL, token: testEnv.UPSTASH_REDIS_REST_TOKEN, enableTelemetry: false, enableAutoPipelining: false })
}

export interface TestKey {
  key: string
  id: string
}

/** A fresh key in Redis (its own limiter budgets: tests never share one). */
export async function createKey(opts: { rpm?: number; tpm?: number; models?: string[]; disabled?: boolean } = {}): Promise<TestKey> {
  const key = generateApiKey()
  const id = `key_${crypto.randomUUID().slice(0, 12)}`
  const fields = toApiKeyFields({ id, tenant: 'test', name: 'test', rpm: opts.rpm ?? 0, tpm: opts.tpm ?? 0, models: opts.models ?? ['*'], created: Date.now(), disabled: opts.disabled ?? false })
  await testRedis().hset(apiKeyRedisKey(await hashApiKey(key)), fields)
  return { key, id }
}

/** A key of its own tenant, so a test's latency hashes hold only its own requests. */
export async function tenantKey(): Promise<{ key: string; tenant: string }> {
  const key = generateApiKey()
  const tenant = `lat-${crypto.randomUUID().slice(0, 8)}`
  await testRedis().hset(apiKeyRedisKey(await hashApiKey(key)), toApiKeyFields({ id: `key-${tenant}`, tenant, name: '', rpm: 0, tpm: 0, models: ['*'], created: Date.now(), disabled: false }))
  return { key, tenant }
}

export function uniqueRequestId(prefix = 'test'): string {
  return `${prefix}-${crypto.randomUUID()}`
}

export async function script(requestId: string, modes: Record<string, Mode>): Promise<void> {
  const res = await fetch(`${testEnv.TEST_CONTROL_URL}/script`, { method: 'POST', body: JSON.stringify({ requestId, modes }) })
  if (!res.ok) throw new Error(`script failed: ${res.status}`)
  await res.body?.cancel()
}

export async function received(requestId: string): Promise<Received[]> {
  return (await (await fetch(`${testEnv.TEST_CONTROL_URL}/received?requestId=${encodeURIComponent(requestId)}`)).json()) as Received[]
}

/** Resolves as soon as a stand-in reports the condition for this request (the fleet long-polls). */
export async function waitFor(requestId: string, until: 'received' | 'clientClosed' | 'completed', node?: string): Promise<Received> {
  const q = new URLSearchParams({ requestId, until, ...(node ? { node } : {}) })
  const res = await fetch(`${testEnv.TEST_CONTROL_URL}/wait?${q}`)
  if (res.status !== 200) throw new Error(`stand-in never saw ${until} for ${requestId}`)
  return (await res.json()) as Received
}

export function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, ...extra })
}

export function messagesBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...extra })
}

export interface CallOptions {
  key?: string
  /** 'bearer' (OpenAI style) or 'x-api-key' (Anthropic style). */
  auth?: 'bearer' | 'x-api-key'
  requestId?: string
  geo?: { lat: number; lon: number }
  headers?: Record<string, string>
  signal?: AbortSignal
}

export function edgeRequest(path: string, body: string | undefined, opts: CallOptions = {}): Request {
  const headers = new Headers({ 'content-type': 'application/json', ...opts.headers })
  if (opts.key) headers.set(opts.auth === 'x-api-key' ? 'x-api-key' : 'authorization', opts.auth === 'x-api-key' ? opts.key : `Bearer ${opts.key}`)
  if (opts.requestId) headers.set('x-request-id', opts.requestId)
  if (opts.geo) headers.set('x-zl-client-geo', `${opts.geo.lat},${opts.geo.lon}`)
  return new Request(`https://edge.test${path}`, { method: body === undefined ? 'GET' : 'POST', headers, ...(body !== undefined ? { body } : {}), ...(opts.signal ? { signal: opts.signal } : {}) })
}

/** An app from the test bindings with some replaced, called like the Worker is (with a ctx). */
export function appWith(envOverrides: Partial<Record<keyof TestEnv, string>> = {}, deps: Partial<EdgeDeps> = {}) {
  const app = createApp(createWorkerDeps({ ...testEnv, ...envOverrides } as Env, deps))
  return {
    app,
    async fetch(req: Request): Promise<Response> {
      const ctx = createExecutionContext()
      const res = await app.fetch(req, testEnv, ctx)
      void waitOnExecutionContext(ctx)
      return res
    },
  }
}
