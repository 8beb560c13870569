import { describe, expect, it } from 'vitest'
import { parseEdgeConfig, parseNodeServerConfig } from './config.ts'

const REQUIRED = {
  UPSTASH_REDIS_REST_URL: 'http://127.0.0.1:8079',
  UPSTASH_REDIS_REST_TOKEN: 'token',
  EDGE_SHARED_SECRET: 'a-secret-of-16-chars',
}

describe('parseEdgeConfig', () => {
  it('fills the documented defaults', () => {
    const c = parseEdgeConfig(REQUIRED)
    expect(c).toMatchObject({
      gpuNodes: [],
      rateLimitFailureMode: 'open',
      rateLimitTimeoutMs: 300,
      maxBodyBytes: 1024 * 1024,
      upstreamConnectTimeoutMs: 2000,
      devMode: false,
      edgeRegion: 'local',
      affinity: { enabled: true, balanceFactor: 1.25, ttlMs: 15 * 60_000 },
      latencyBatchMaxSamples: 2000,
    })
    expect(c.adminToken).toBeUndefined()
  })

  it('parses GPU_NODES from a JSON string or an already-parsed array', () => {
    const nodes = [{ id: 'a', url: 'http://127.0.0.1:9101', region: 'us-east', lat: 39, lon: -77.5, models: ['tiny'] }]
    expect(parseEdgeConfig({ ...REQUIRED, GPU_NODES: JSON.stringify(nodes) }).gpuNodes).toEqual(nodes)
    expect(parseEdgeConfig({ ...REQUIRED, GPU_NODES: nodes }).gpuNodes).toEqual(nodes)
  })

  it('reads flags, numbers and empty strings the way env files write them', () => {
    const c = parseEdgeConfig({ ...REQUIRED, DEV_MODE: '1', RATE_LIMIT_FAILURE_MODE: 'closed', RATE_LIMIT_TIMEOUT_MS: '150', MAX_BODY_BYTES: '', EDGE_LAT: '53.3', LATENCY_BATCH_MAX_SAMPLES: '8' })
    expect(c).toMatchObject({ devMode: true, rateLimitFailureMode: 'closed', rateLimitTimeoutMs: 150, maxBodyBytes: 1024 * 1024, edgeLat: 53.3, latencyBatchMaxSamples: 8 })
    expect(parseEdgeConfig({ ...REQUIRED, DEV_MODE: 'false' }).devMode).toBe(false)
  })

  it('reads the affinity knobs: AFFINITY=off, a balance factor of at least 1, a TTL in ms', () => {
    expect(parseEdgeConfig({ ...REQUIRED, AFFINITY: 'off', AFFINITY_BALANCE_FACTOR: '1.5', AFFINITY_TTL_MS: '600000' }).affinity).toEqual({ enabled: false, balanceFactor: 1.5, ttlMs: 600_000 })
    expect(parseEdgeConfig({ ...REQUIRED, AFFINITY: '0' }).affinity.enabled).toBe(false)
    expect(parseEdgeConfig({ ...REQUIRED, AFFINITY: 'on' }).affinity.enabled).toBe(true)
    for (const bad of [{ AFFINITY: 'maybe' }, { AFFINITY_BALANCE_FACTOR: '0.9' }, { AFFINITY_TTL_MS: '10' }]) {
      expect(() => parseEdgeConfig({ ...REQUIRED, ...bad })).toThrow(Object.keys(bad)[0])
    }
  })

  it('names every bad variable and never echoes a value', () => {
    const secret = 'short'
    let message = ''
    try {
      parseEdgeConfig({ UPSTASH_REDIS_REST_URL: 'nope', EDGE_SHARED_SECRET: secret, GPU_NODES: '[{"id":"x"}]', RATE_LIMIT_FAILURE_MODE: 'maybe' })
    } catch (e) {
      message = (e as Error).message
    }
    for (const name of ['UPSTASH_REDIS_REST_URL', 'UPSTASH_REDIS_REST_TOKEN', 'EDGE_SHARED_SECRET', 'GPU_NODES.0.url', 'RATE_LIMIT_FAILURE_MODE']) expect(message).toContain(name)
    expect(message).not.toContain(secret)
  })
})

describe('parseNodeServerConfig', () => {
  it('defaults to 127.0.0.1:8788 over plain HTTP', () => {
    expect(parseNodeServerConfig({})).toEqual({ host: '127.0.0.1', port: 8788 })
  })

  it('needs both TLS_CERT and TLS_KEY', () => {
    expect(parseNodeServerConfig({ TLS_CERT: 'c.pem', TLS_KEY: 'k.pem' }).tls).toEqual({ certFile: 'c.pem', keyFile: 'k.pem' })
    expect(() => parseNodeServerConfig({ TLS_CERT: 'c.pem' })).toThrow(/TLS_CERT\/TLS_KEY/)
  })
})
