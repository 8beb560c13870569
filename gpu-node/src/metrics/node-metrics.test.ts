import { describe, expect, it } from 'vitest'
import { createMetricsObserver } from './engine-observer.ts'
import { createNodeMetrics } from './node-metrics.ts'
import { RequestTimer } from './request-timer.ts'
import { startTestNode } from '../../test/support/test-node.ts'

/** Every metric DESIGN.md §8 names. */
const DESIGN_METRIC_NAMES = [
  'zl_time_to_first_token_seconds',
  'zl_inter_token_latency_seconds',
  'zl_e2e_request_latency_seconds',
  'zl_request_queue_time_seconds',
  'zl_num_requests_running',
  'zl_num_requests_waiting',
  'zl_kv_cache_usage_ratio',
  'zl_prompt_tokens_total',
  'zl_generation_tokens_total',
  'zl_request_success_total',
  'zl_request_failure_total',
  'zl_step_duration_seconds',
  'zl_batch_size',
]

const stats = { running: 3, waiting: 7, maxBatch: 32, kvUsedFrac: 0.5, tokPerSec: 100, prefillTokPerSec: 2000, draining: false }

describe('node metrics', () => {
  it('declares every DESIGN.md §8 metric with region and model labels', async () => {
    const metrics = createNodeMetrics({ region: 'eu-west', model: 'tiny', stats: () => stats })
    const text = await metrics.render()
    for (const name of DESIGN_METRIC_NAMES) expect(text).toContain(`# TYPE ${name} `)
    expect(text).toContain('zl_num_requests_running{region="eu-west",model="tiny"} 3')
    expect(text).toContain('zl_num_requests_waiting{region="eu-west",model="tiny"} 7')
    expect(text).toContain('zl_kv_cache_usage_ratio{region="eu-west",model="tiny"} 0.5')
  })

  it('copies the prefix cache’s counts and bytes at each scrape (0 with the cache off)', async () => {
    const cache = { queries: 900, hits: 640, evictions: 3, bytes: 4096, capacityBytes: 65536 }
    let current = { ...stats, prefixCache: cache }
    const metrics = createNodeMetrics({ region: 'r', model: 'm', stats: () => current })
    let text = await metrics.render()
    for (const line of ['zl_prefix_cache_queries_total{region="r",model="m"} 900', 'zl_prefix_cache_hits_total{region="r",model="m"} 640', 'zl_prefix_cache_evictions_total{region="r",model="m"} 3', 'zl_prefix_cache_bytes{region="r",model="m"} 4096', 'zl_prefix_cache_capacity_bytes{region="r",model="m"} 65536']) expect(text).toContain(line)
    current = { ...stats, prefixCache: { ...cache, queries: 1000, hits: 700 } }
    text = await metrics.render()
    expect(text).toContain('zl_prefix_cache_hits_total{region="r",model="m"} 700')
    expect(await createNodeMetrics({ region: 'r', model: 'm', stats: () => stats }).render()).toContain('zl_prefix_cache_hits_total{region="r",model="m"} 0')
  })

  it('copies speculative decoding’s counts and acceptance at each scrape (0 while it is off)', async () => {
    const metrics = createNodeMetrics({ region: 'r', model: 'm', stats: () => ({ ...stats, speculation: { steps: 40, drafts: 50, draftTokens: 200, acceptedTokens: 150 } }) })
    const text = await metrics.render()
    for (const line of ['zl_spec_decode_num_drafts_total{region="r",model="m"} 50', 'zl_spec_decode_num_draft_tokens_total{region="r",model="m"} 200', 'zl_spec_decode_num_accepted_tokens_total{region="r",model="m"} 150', 'zl_spec_decode_steps_total{region="r",model="m"} 40', 'zl_spec_decode_acceptance_ratio{region="r",model="m"} 0.75']) expect(text).toContain(line)
    const off = await createNodeMetrics({ region: 'r', model: 'm', stats: () => stats }).render()
    expect(off).toContain('zl_spec_decode_num_accepted_tokens_total{region="r",model="m"} 0')
    expect(off).toContain('zl_spec_decode_acceptance_ratio{region="r",model="m"} 0')
  })

  it('resolves milliseconds in latency histograms', async () => {
    const metrics = createNodeMetrics({ region: 'r', model: 'm', stats: () => stats })
    expect(await metrics.render()).toContain('zl_time_to_first_token_seconds_bucket{le="0.001",region="r",model="m"} 0')
  })

  it('feeds step duration, batch size and queue time from the engine observer', async () => {
    const metrics = createNodeMetrics({ region: 'r', model: 'm', stats: () => stats })
    const observer = createMetricsObserver(metrics)
    observer.onStep?.({ durationMs: 12, decodeRows: 4, prefillRows: 1, prefillTokens: 128 })
    observer.onScheduled?.('a', 30)
    const text = await metrics.render()
    expect(text).toContain('zl_step_duration_seconds_sum{region="r",model="m"} 0.012')
    expect(text).toContain('zl_batch_size_sum{region="r",model="m"} 5')
    expect(text).toContain('zl_request_queue_time_seconds_sum{region="r",model="m"} 0.03')
  })

  it('times a request from arrival: TTFT, inter-token gaps, e2e, tokens and outcome', async () => {
    const metrics = createNodeMetrics({ region: 'r', model: 'm', stats: () => stats })
    let t = 1000
    const timer = new RequestTimer(metrics, () => t)
    t = 1050
    timer.onText(1)
    t = 1070
    timer.onText(3) // two tokens in one event: two 10 ms gaps
    t = 1100
    timer.finish('length', { promptTokens: 5, completionTokens: 3 })
    timer.fail('client_aborted') // ignored: the request already settled
    expect(timer.ttftMs()).toBe(50)
    const text = await metrics.render()
    expect(text).toContain('zl_time_to_first_token_seconds_sum{region="r",model="m"} 0.05')
    expect(text).toContain('zl_inter_token_latency_seconds_count{region="r",model="m"} 2')
    expect(text).toContain('zl_e2e_request_latency_seconds_sum{region="r",model="m"} 0.1')
    expect(text).toContain('zl_prompt_tokens_total{region="r",model="m"} 5')
    expect(text).toContain('zl_generation_tokens_total{region="r",model="m"} 3')
    expect(text).toContain('zl_request_success_total{finished_reason="length",region="r",model="m"} 1')
    expect(text).not.toContain('reason="client_aborted"')
  })

  it('counts failures by error code', async () => {
    const metrics = createNodeMetrics({ region: 'r', model: 'm', stats: () => stats })
    new RequestTimer(metrics).fail('overloaded')
    new RequestTimer(metrics).finish('error', { promptTokens: 1, completionTokens: 0 }, 'internal')
    const text = await metrics.render()
    expect(text).toContain('zl_request_failure_total{reason="overloaded",region="r",model="m"} 1')
    expect(text).toContain('zl_request_failure_total{reason="internal",region="r",model="m"} 1')
  })
})

describe('GET /metrics', () => {
  it('exposes every DESIGN.md §8 name as Prometheus text, with live engine gauges and request counts', async () => {
    const node = await startTestNode({ allowUnsigned: true })
    try {
      const body = JSON.stringify({ model: 'zl-test-model', messages: [{ role: 'user', content: 'hi' }] })
      await (await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body })).text()
      const res = await fetch(`${node.url}/metrics`)
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toContain('text/plain')
      const text = await res.text()
      for (const name of DESIGN_METRIC_NAMES) expect(text).toContain(`# TYPE ${name} `)
      expect(text).toContain('zl_kv_cache_usage_ratio{region="test-region",model="zl-test-model"} 0.25')
      expect(text).toContain('zl_request_success_total{finished_reason="stop",region="test-region",model="zl-test-model"} 1')
      expect(text).toMatch(/zl_time_to_first_token_seconds_count\{region="test-region",model="zl-test-model"\} 1/)
    } finally {
      await node.close()
    }
  })
})
