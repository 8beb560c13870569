import { describe, expect, it } from 'vitest'
import { parseNodeConfig } from './config.ts'

describe('parseNodeConfig', () => {
  it('fills the documented defaults', () => {
    const c = parseNodeConfig({ EDGE_SHARED_SECRET: 's3cret' })
    expect(c).toMatchObject({
      modelDir: 'trained/zl-code',
      host: '127.0.0.1',
      port: 9101,
      limits: { maxBatch: 32, maxQueue: 256, kvBudgetBytes: 512 * 1024 * 1024, prefillChunkTokens: 128, speculation: { mode: 'auto', maxDraft: 5 } },
      executionProvider: 'cpu',
      slotKvEdit: true,
      maxBodyBytes: 1024 * 1024,
      keepAliveMs: 5000,
      allowUnsigned: false,
    })
    expect(c.limits.batchRowsBesideInteractive).toBeUndefined()
    expect(c.upstash).toBeUndefined()
    expect(c.tls).toBeUndefined()
    expect(c.publicUrl).toBeUndefined()
  })

  it('reads every variable', () => {
    const c = parseNodeConfig({
      MODEL_DIR: 'models/small', MODEL_FILE: 'onnx/model.onnx', HOST: '0.0.0.0', PORT: '9102', NODE_ID: 'eu-1', REGION: 'eu-west', REGION_LAT: '53.3',
      REGION_LON: '-6.3', PUBLIC_URL: 'https://eu.example.com', ALLOW_UNSIGNED: '1', UPSTASH_REDIS_REST_URL: 'http://127.0.0.1:8079',
      UPSTASH_REDIS_REST_TOKEN: 'tok', MAX_BATCH: '8', MAX_QUEUE: '16', KV_BUDGET_MB: '64', PREFILL_CHUNK: '32',
      EXECUTION_PROVIDER: 'cuda', INTRA_OP_THREADS: '2', TLS_CERT: '/c.pem', TLS_KEY: '/k.pem', MAX_BODY_BYTES: '2048',
      KEEPALIVE_MS: '100', DRAIN_GRACE_MS: '50', SLOT_KV_EDIT: '0', SPEC_DECODING: 'off', SPEC_MAX_DRAFT: '8',
      BATCH_ROWS_BESIDE_INTERACTIVE: '4',
    })
    expect(c).toMatchObject({
      modelDir: 'models/small', modelFile: 'onnx/model.onnx', host: '0.0.0.0', port: 9102, nodeId: 'eu-1', region: 'eu-west', lat: 53.3, lon: -6.3,
      publicUrl: 'https://eu.example.com', allowUnsigned: true, upstash: { url: 'http://127.0.0.1:8079', token: 'tok' },
      limits: { maxBatch: 8, maxQueue: 16, kvBudgetBytes: 64 * 1024 * 1024, prefillChunkTokens: 32, speculation: { mode: 'off', maxDraft: 8 }, batchRowsBesideInteractive: 4 }, executionProvider: 'cuda',
      intraOpThreads: 2, slotKvEdit: false, tls: { certFile: '/c.pem', keyFile: '/k.pem' }, maxBodyBytes: 2048, keepAliveMs: 100, drainGraceMs: 50,
    })
    expect(c.edgeSharedSecret).toBeUndefined()
  })

  it('refuses to start without a shared secret unless ALLOW_UNSIGNED=1', () => {
    expect(() => parseNodeConfig({})).toThrow(/EDGE_SHARED_SECRET: required \(or set ALLOW_UNSIGNED=1/)
    expect(() => parseNodeConfig({ ALLOW_UNSIGNED: '0' })).toThrow(/EDGE_SHARED_SECRET/)
    expect(parseNodeConfig({ ALLOW_UNSIGNED: '1' }).allowUnsigned).toBe(true)
  })

  it('lists every bad variable in one message, without their values', () => {
    let message = ''
    try {
      parseNodeConfig({ EDGE_SHARED_SECRET: 'x', PORT: 'http', MAX_BATCH: '0', EXECUTION_PROVIDER: 'tpu', UPSTASH_REDIS_REST_URL: 'http://r', TLS_KEY: '/k.pem' })
    } catch (e) {
      message = (e as Error).message
    }
    for (const name of ['PORT', 'MAX_BATCH', 'EXECUTION_PROVIDER', 'UPSTASH_REDIS_REST_URL/UPSTASH_REDIS_REST_TOKEN', 'TLS_CERT/TLS_KEY']) {
      expect(message).toContain(name)
    }
    expect(message).not.toContain('tpu')
  })

  it('refuses a bad speculative decoding setting at start, naming it in one message', () => {
    for (const [name, value] of [['SPEC_DECODING', 'yes'], ['SPEC_DECODING', '1'], ['SPEC_MAX_DRAFT', '0'], ['SPEC_MAX_DRAFT', '4.5'], ['SPEC_MAX_DRAFT', '33'], ['SPEC_MAX_DRAFT', 'many']]) {
      expect(() => parseNodeConfig({ EDGE_SHARED_SECRET: 'x', [name!]: value })).toThrow(new RegExp(`^invalid gpu-node configuration:\\n  ${name}: `))
    }
    expect(parseNodeConfig({ EDGE_SHARED_SECRET: 'x', SPEC_DECODING: 'on', SPEC_MAX_DRAFT: '1' }).limits.speculation).toEqual({ mode: 'on', maxDraft: 1 })
  })

  it('refuses a bad batch-rows limit at start, naming it in one message', () => {
    for (const [value, maxBatch] of [['-1', '32'], ['2.5', '32'], ['half', '32'], ['9', '8']]) {
      expect(() => parseNodeConfig({ EDGE_SHARED_SECRET: 'x', MAX_BATCH: maxBatch, BATCH_ROWS_BESIDE_INTERACTIVE: value })).toThrow(/^invalid gpu-node configuration:\n {2}BATCH_ROWS_BESIDE_INTERACTIVE: [^\n]*$/)
    }
    expect(parseNodeConfig({ EDGE_SHARED_SECRET: 'x', MAX_BATCH: '8', BATCH_ROWS_BESIDE_INTERACTIVE: '8' }).limits.batchRowsBesideInteractive).toBe(8)
    expect(parseNodeConfig({ EDGE_SHARED_SECRET: 'x', BATCH_ROWS_BESIDE_INTERACTIVE: '0' }).limits.batchRowsBesideInteractive).toBeUndefined()
  })

  it('treats empty strings as unset', () => {
    expect(parseNodeConfig({ EDGE_SHARED_SECRET: 'x', PORT: '', TLS_CERT: '' }).port).toBe(9101)
  })
})
