/**
 * The node's Prometheus metrics (DESIGN.md §8): vLLM-like names with a `zl_` prefix, every
 * series labelled with this node's `region` and served `model`. The registry is our own so
 * tests and several nodes in one process never collide in prom-client's global one.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { EngineStats } from '../engine/types.ts'

/** Seconds; vLLM-like, resolving milliseconds at the low end and long streams at the top. */
export const LATENCY_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80]
/** Model steps between an abort and the release of the sequence's KV (the target is ≤ 2). */
export const ABORT_STEPS_BUCKETS = [1, 2, 3, 5, 10]
/** Sequences per scheduler step. */
export const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256]

export interface NodeMetricsOptions {
  region: string
  /** Unknown until the model directory is loaded: set it then with setModel(). */
  model?: string
  /** Read at scrape time for the running/waiting/KV gauges. */
  stats: () => EngineStats
}

export interface NodeMetrics {
  registry: Registry
  timeToFirstToken: Histogram
  interTokenLatency: Histogram
  e2eRequestLatency: Histogram
  requestQueueTime: Histogram
  stepDuration: Histogram
  batchSize: Histogram
  abortFreeSteps: Histogram
  preemptions: Counter
  promptTokens: Counter
  generationTokens: Counter
  requestSuccess: Counter<'finished_reason'>
  requestFailure: Counter<'reason'>
  /** Labels every series with the served model id (once it is loaded). */
  setModel(model: string): void
  /** Prometheus text exposition of every metric. */
  render(): Promise<string>
  contentType: string
}

export function createNodeMetrics(opts: NodeMetricsOptions): NodeMetrics {
  const registry = new Registry()
  const setModel = (model: string) => registry.setDefaultLabels({ region: opts.region, model })
  setModel(opts.model ?? '')
  const registers = [registry]
  const histogram = (name: string, help: string, buckets = LATENCY_BUCKETS_S) => new Histogram({ name, help, buckets, registers })
  const gauge = (name: string, help: string, read: (s: EngineStats) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read(opts.stats()))
      },
    })

  gauge('zl_num_requests_running', 'Requests in the running batch.', (s) => s.running)
  gauge('zl_num_requests_waiting', 'Requests admitted and waiting to be scheduled.', (s) => s.waiting)
  gauge('zl_kv_cache_usage_ratio', 'KV bytes touched per step over the KV budget, 0..1.', (s) => s.kvUsedFrac)
  // The prefix cache's cumulative counts live in the engine; a scrape copies them (vLLM's prefix_cache_* names).
  const counter = (name: string, help: string, read: (s: EngineStats) => number) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset()
        this.inc(read(opts.stats()))
      },
    })
  counter('zl_prefix_cache_queries_total', 'Prompt tokens looked up in the prefix cache.', (s) => s.prefixCache?.queries ?? 0)
  counter('zl_prefix_cache_hits_total', 'Prompt tokens found in the prefix cache (their prefill skipped).', (s) => s.prefixCache?.hits ?? 0)
  counter('zl_prefix_cache_evictions_total', 'Prefix-cache blocks evicted to make room.', (s) => s.prefixCache?.evictions ?? 0)
  gauge('zl_prefix_cache_bytes', 'KV bytes the prefix cache holds.', (s) => s.prefixCache?.bytes ?? 0)
  // Speculative decoding's cumulative counts (vLLM's spec_decode_* names); all 0 while it is off.
  counter('zl_spec_decode_num_drafts_total', 'Rows that verified a draft, summed over decode steps.', (s) => s.speculation?.drafts ?? 0)
  counter('zl_spec_decode_num_draft_tokens_total', 'Draft tokens verified.', (s) => s.speculation?.draftTokens ?? 0)
  counter('zl_spec_decode_num_accepted_tokens_total', 'Draft tokens accepted (each one a token generated without a step of its own).', (s) => s.speculation?.acceptedTokens ?? 0)
  counter('zl_spec_decode_steps_total', 'Decode steps that verified drafts.', (s) => s.speculation?.steps ?? 0)
  gauge('zl_spec_decode_acceptance_ratio', 'Draft tokens accepted over draft tokens verified, since start; 0 before any.', (s) => (s.speculation?.draftTokens ? s.speculation.acceptedTokens / s.speculation.draftTokens : 0))
  gauge('zl_prefix_cache_capacity_bytes', 'The prefix cache budget (PREFIX_CACHE_MB), in bytes of whole blocks; 0 when off.', (s) => s.prefixCache?.capacityBytes ?? 0)

  return {
    registry,
    timeToFirstToken: histogram('zl_time_to_first_token_seconds', 'Request arrival to first generated text, seconds.'),
    interTokenLatency: histogram('zl_inter_token_latency_seconds', 'Time between generated tokens of one request, seconds.'),
    e2eRequestLatency: histogram('zl_e2e_request_latency_seconds', 'Request arrival to finish, seconds.'),
    requestQueueTime: histogram('zl_request_queue_time_seconds', 'Time a request waited before its prefill started, seconds.'),
    stepDuration: histogram('zl_step_duration_seconds', 'Duration of one scheduler step (model forward), seconds.'),
    batchSize: histogram('zl_batch_size', 'Sequences run in one scheduler step.', BATCH_SIZE_BUCKETS),
    abortFreeSteps: histogram('zl_abort_free_steps', 'Model steps started between an abort and the release of its KV (or its row\'s takeover by another request).', ABORT_STEPS_BUCKETS),
    preemptions: new Counter({ name: 'zl_num_preemptions_total', help: 'Sequences preempted (KV freed, recomputed later) to respect the KV budget.', registers }),
    promptTokens: new Counter({ name: 'zl_prompt_tokens_total', help: 'Prompt tokens of finished requests.', registers }),
    generationTokens: new Counter({ name: 'zl_generation_tokens_total', help: 'Generated tokens of finished requests.', registers }),
    requestSuccess: new Counter({
      name: 'zl_request_success_total',
      help: 'Requests that finished normally, by finish reason.',
      labelNames: ['finished_reason'],
      registers,
    }),
    requestFailure: new Counter({
      name: 'zl_request_failure_total',
      help: 'Requests that failed, by error code (or client_aborted).',
      labelNames: ['reason'],
      registers,
    }),
    setModel,
    render: () => registry.metrics(),
    contentType: registry.contentType,
  }
}
