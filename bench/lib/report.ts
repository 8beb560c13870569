/**
 * The issue's target table, and the three outputs built from a run's sections:
 * bench/results/latest.json (figures under the exact keys of the table, plus raw numbers),
 * bench/results/latest.md (figure, value, target, pass/miss) and the generated block in
 * docs/PERFORMANCE.md between the markers below. Sections not run this time are carried over
 * from the previous latest.json, each with the time and mode of the run that measured it.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'
import type { SectionResult } from './report-types.ts'

export const SECTIONS = ['engine', 'edge', 'cancel', 'ratelimit', 'prefix', 'wan', 'structured', 'realtime'] as const
export type SectionName = (typeof SECTIONS)[number]

export interface Target {
  key: string
  /** What the figure is, for the tables. */
  label: string
  kind: 'min' | 'max' | 'report' | 'all-of'
  target?: number
  /** For 'all-of': the key whose value the figure must equal. */
  of?: string
}

export const TARGETS: Target[] = [
  { key: 'engine.continuous_over_sequential_tokens_per_s', label: 'continuous / one-at-a-time tokens/s (32 streams, 32-token prompts, 96 new tokens)', kind: 'min', target: 4.0 },
  { key: 'engine.engine_over_raw_ort_tokens_per_s', label: 'engine / raw ONNX Runtime tokens/s (batch 32, same KV widths)', kind: 'min', target: 0.85 },
  { key: 'engine.optimum_layout_over_slot_tokens_per_s', label: 'Optimum-layout (concat KV) graph edited onto the slot KV path / the slot layout, decode tokens/s (small, batch 32)', kind: 'min', target: 0.9 },
  { key: 'engine.static8_over_continuous_p99_ttft', label: 'static-8 / continuous p99 TTFT (Poisson, 80 % of static-8 capacity)', kind: 'min', target: 3.0 },
  { key: 'engine.idle_ttft_minus_prefill_ms', label: 'idle TTFT − prefill step, ms (direct, one request, median)', kind: 'max', target: 3 },
  { key: 'engine.event_loop_delay_p99_ms', label: 'event-loop delay p99 on the socket thread under full load, ms', kind: 'max', target: 10 },
  { key: 'engine.ttft_b1_over_transformers_js', label: 'TTFT, one 64-token prompt: the node (over HTTP) ÷ transformers.js generate() (in process), same 58.5 M GPT-2 graph, 2 threads each', kind: 'max', target: 1.0 },
  { key: 'engine.decode_b1_over_transformers_js', label: 'decode tokens/s, one request: the node ÷ transformers.js, same graph', kind: 'min', target: 1.2 },
  { key: 'engine.c16_tokens_per_s_over_transformers_js_batched', label: '16 requests at once, tokens/s: the node ÷ transformers.js batched generate() of the same 16 (equal lengths)', kind: 'min', target: 1.5 },
  { key: 'engine.c16_p99_ttft_over_transformers_js_batched', label: '16 at once: the node p99 TTFT ÷ the batched generate()\'s first token', kind: 'max', target: 1.0 },
  { key: 'engine.greedy_equal_to_transformers_js', label: 'greedy rows equal to transformers.js (64 new tokens; ties excepted: a row that parts at a float tie counts as equal)', kind: 'min', target: 1.0 },
  { key: 'edge.instructions_per_request_over_bare', label: 'Node edge ÷ bare Hono passthrough, instructions per request (callgrind; non-streaming 1 kB; auth + rate limits + validation on; clock-driven work apart)', kind: 'max', target: 1.5 },
  { key: 'edge.instructions_per_request_over_bare_h2', label: "the same ÷ the bare passthrough reaching its upstream over one h2c connection, as the edge reaches other regions' nodes", kind: 'report' },
  { key: 'edge.pinned_added_ttfb_p50_c1_minus_bare_ms', label: 'pinned (each proxy alone on core 0): Node edge − bare passthrough, added TTFB p50 at concurrency 1, ms', kind: 'max', target: 0.5 },
  { key: 'edge.pinned_added_ttfb_p99_c64_minus_bare_ms', label: 'pinned: Node edge − bare passthrough, added TTFB p99 at concurrency 64, ms', kind: 'max', target: 10 },
  { key: 'edge.pinned_added_ttfb_p50_c1_minus_bare_h2_ms', label: "pinned: Node edge − the bare passthrough over one h2c connection (as the edge reaches other regions' nodes), added TTFB p50 at concurrency 1, ms", kind: 'report' },
  { key: 'edge.pinned_added_ttfb_p99_c64_minus_bare_h2_ms', label: 'pinned: Node edge − the bare passthrough over one h2c connection, added TTFB p99 at concurrency 64, ms', kind: 'report' },
  { key: 'edge.nginx_added_ttfb_p50_c1_ms', label: 'pinned: nginx (nginx-light) added TTFB p50 at concurrency 1, ms — the floor', kind: 'report' },
  // Unpinned (the edge shares its cores with the node and the load generator): reported.
  { key: 'edge.node_added_ttfb_ms_p50_c1', label: 'unpinned: Node edge added TTFB p50 at concurrency 1, ms (auth + rate limit on)', kind: 'report' },
  { key: 'edge.node_added_ttfb_ms_p99_c64', label: 'unpinned: Node edge added TTFB p99 at concurrency 64, ms', kind: 'report' },
  { key: 'edge.node_requests_per_s_one_core', label: 'Node edge requests per CPU-second on one core (instant upstream, non-streaming)', kind: 'report' },
  { key: 'edge.wrangler_added_ttfb_ms_p50_c1', label: 'wrangler dev added TTFB p50 at concurrency 1, ms', kind: 'report' },
  { key: 'edge.wrangler_stream_gap_max_over_node_c8', label: "longest gap between text frames, 8 concurrent 400-token streams: the Workers edge (npm start's default) ÷ the Node edge", kind: 'max', target: 3 },
  { key: 'edge.wrangler_over_node_p99_c64', label: 'TTFB p99 at concurrency 64: the Workers edge ÷ the Node edge, same requests', kind: 'max', target: 2 },
  { key: 'edge.wrangler_over_bare_worker_p99_c64', label: 'TTFB p99 at concurrency 64: the Workers edge ÷ a Worker that only proxies, under the same local runtime (what our Worker adds to the runtime\'s own p99)', kind: 'report' },
  { key: 'prefix.warm_turn_ttft_speedup', label: 'multi-turn chat, one conversation at a time: turns 2–6 p50 TTFT without ÷ with the prefix cache (512-token shared system prompt)', kind: 'min', target: 5 },
  { key: 'prefix.zero_hit_throughput_ratio', label: 'tokens/s with ÷ without the prefix cache, prompts that share nothing', kind: 'min', target: 0.98 },
  { key: 'prefix.affine_cached_share', label: 'cached ÷ prompt tokens of turns 2–6 through the Node edge with cache-affine routing (4 nodes in a region, 16 conversations at once)', kind: 'min', target: 0.75 },
  { key: 'prefix.round_robin_cached_share', label: 'the same routed round robin (the cache-blind baseline)', kind: 'report' },
  { key: 'prefix.least_outstanding_cached_share', label: 'the same routed to the node with the fewest requests in flight (the load-aware baseline)', kind: 'report' },
  { key: 'prefix.round_robin_over_affine_warm_ttft', label: 'turns 2–6 p50 TTFT: round robin ÷ cache-affine routing', kind: 'min', target: 1 },
  { key: 'prefix.least_outstanding_over_affine_warm_ttft', label: 'turns 2–6 p50 TTFT: least outstanding ÷ cache-affine routing', kind: 'min', target: 1 },
  { key: 'prefix.responses_chain_cached_share', label: 'cached ÷ input tokens of turns 2–6 of a previous_response_id conversation through the Node edge (4 nodes, one conversation at a time)', kind: 'min', target: 0.75 },
  { key: 'prefix.responses_chain_over_chat_warm_ttft', label: 'turns 2–6 p50 TTFT: previous_response_id turns ÷ chat turns resending the conversation (the same turns, through the same edge)', kind: 'max', target: 1.2 },
  { key: 'prefix.hot_prompt_max_over_mean_load', label: '64 conversations with one system prompt over 4 nodes: most-loaded ÷ mean requests', kind: 'max', target: 1.5 },
  { key: 'cancel.stopped_within_two_steps', label: 'disconnected streams whose KV the node freed within two steps', kind: 'all-of', of: 'cancel.tried' },
  { key: 'wan.cross_region_excess_ms', label: 'cross-region excess: TTFB served one region away (RTT 70 ms) − TTFB served locally − RTT, p50 through the Node edge, ms', kind: 'max', target: 10 },
  { key: 'ratelimit.check_ms_p50', label: '@upstash/ratelimit check via the local bridge, p50 ms', kind: 'max', target: 2 },
  { key: 'structured.mask_us_per_token_p50', label: 'structured output: grammar mask + accept per token per row, µs (32000-token vocabulary)', kind: 'max', target: 50 },
  { key: 'structured.compile_ms_p50', label: 'structured output: compiling a typical schema new to the engine, ms (cached thereafter)', kind: 'report' },
  { key: 'structured.json_schema_over_free_tokens_per_s', label: 'structured output: tokens/s of 32 rows each constrained by a bounded JSON schema ÷ the same 32 rows free, as many tokens row by row (small, in process)', kind: 'min', target: 0.9 },
  { key: 'realtime.superseded_tokens_after_successor', label: 'typing (16 typists, a request every 150 ms, x-zl-supersede): model steps a superseded request still ran after its successor arrived, mean (one token per step; zl-code)', kind: 'max', target: 2 },
  { key: 'realtime.typing_p99_ttft_over_idle', label: 'typing: p99 TTFT of the keystroke requests that got a first token ÷ idle TTFT (zl-code; files opened first)', kind: 'max', target: 3 },
  { key: 'realtime.interactive_p99_ttft_under_2x_overload_over_idle', label: 'interactive requests while batch traffic keeps twice the batch cap busy: p99 TTFT ÷ idle (zl-code)', kind: 'max', target: 3 },
  { key: 'realtime.warm_turn_ttft_over_suffix_prefill', label: 'a warm chat turn\'s TTFT ÷ a fresh request of just its uncached tokens (~900-token system prompt, 6 turns, conversations one at a time, small, median)', kind: 'max', target: 2 },
  { key: 'realtime.spec_speedup_edit_batch1', label: 'speculative decoding: decode tokens/s of one greedy request rewriting a code file it was given, auto ÷ off (zl-code)', kind: 'min', target: 2 },
  { key: 'realtime.spec_over_off_batch32_no_copy', label: 'speculative decoding: tokens/s of 32 sampled requests whose answers copy nothing, auto ÷ off (zl-code)', kind: 'min', target: 0.98 },
  { key: 'realtime.spec_exact', label: 'speculative decoding: every text of both runs equal with auto and off (greedy and seeded, batched; 1 = all)', kind: 'min', target: 1 },
  { key: 'structured.n4_over_n1_time', label: 'one request with n = 4 ÷ one with n = 1, wall time (120-token prompt, 32 new tokens; the other choices forked from the first one\'s prefill)', kind: 'max', target: 1.6 },
]

/**
 * One section in latest.json: its figures as top-level keys (so `engine.continuous_over_…` is
 * the path to the figure), then the raw numbers, notes and when/how it was measured.
 */
/** Numbers shown beside the targets for perspective (paths into latest.json). */
export const CONTEXT: Array<{ label: string; path: string; unit: string }> = [
  { label: 'continuous batching, closed batch of 32', path: 'engine.raw.continuous_tok_s', unit: 'tok/s' },
  { label: 'static batches of 8', path: 'engine.raw.static8_tok_s', unit: 'tok/s' },
  { label: 'one at a time', path: 'engine.raw.sequential_tok_s', unit: 'tok/s' },
  { label: 'raw ONNX Runtime at batch 32 over the steady-state KV widths', path: 'engine.raw.raw_ort_tok_s', unit: 'tok/s' },
  { label: 'ceiling of continuous / one-at-a-time set by raw ONNX Runtime (raw batch-32 rate / one-at-a-time rate)', path: 'engine.raw.continuous_over_sequential_ceiling', unit: '×' },
  { label: 'unedited Optimum concat KV path / the slot layout, decode tokens/s (small, batch 32; SLOT_KV_EDIT=0)', path: 'engine.raw.optimum_layout.concat_unedited_over_slots', unit: '×' },
  { label: 'one 64-token prefill step on the transformers.js comparison graph, as served (slot KV edit, logits for the last position) / as exported (concat KV, logits for every position)', path: 'engine.raw.prefill_paths.step_over_as_exported.slots_last_logits', unit: '×' },
  { label: 'the same, the slot KV edit alone / as exported', path: 'engine.raw.prefill_paths.step_over_as_exported.slots_all_logits', unit: '×' },
  { label: 'the same, logits for the last position alone (concat KV) / as exported', path: 'engine.raw.prefill_paths.step_over_as_exported.concat_last_logits', unit: '×' },
  { label: '/healthz probe latency p99 under full load (from outside)', path: 'engine.raw.full_load.healthz_probe_ms.p99', unit: 'ms' },
  { label: 'bare Hono-on-Node passthrough: added TTFB p50 at concurrency 1 (no auth, no limits)', path: 'edge.raw.bare_hono_added_ttfb_ms_p50_c1', unit: 'ms' },
  { label: 'bare Hono-on-Node passthrough: added TTFB p99 at concurrency 64 (no auth, no limits)', path: 'edge.raw.bare_hono_added_ttfb_ms_p99_c64', unit: 'ms' },
  { label: 'bare Hono-on-Node passthrough: requests per CPU-second (same core, same load)', path: 'edge.raw.one_core.bare_hono_passthrough_requests_per_cpu_s', unit: 'req/s' },
  { label: 'wrangler dev added TTFB p99 at concurrency 64', path: 'edge.wrangler_added_ttfb_ms_p99_c64', unit: 'ms' },
  { label: 'longest frame gap, 8 concurrent streams, through the Workers edge', path: 'edge.wrangler_stream_gap_max_ms_c8', unit: 'ms' },
  { label: 'longest frame gap, 8 concurrent streams, through the Node edge', path: 'edge.node_stream_gap_max_ms_c8', unit: 'ms' },
  { label: 'longest frame gap, 8 concurrent streams, through plain wrangler dev (DevTools inspector on)', path: 'edge.raw.streams.streams_c8.wrangler-inspector.gap_max_ms', unit: 'ms' },
  { label: 'the same two regions away (ap-south, RTT 190 ms)', path: 'wan.cross_region_excess_ms_ap_south', unit: 'ms' },
  { label: 'the same with a 100 kB body (more than HTTP/2\'s default 64 KiB window)', path: 'wan.cross_region_excess_ms_large_body', unit: 'ms' },
  { label: 'the same through wrangler dev (the Workers entry; workerd speaks HTTP/1.1 to origins)', path: 'wan.raw.wrangler_excess_ms.eu-west', unit: 'ms' },
  { label: 'the same asked directly, no edge (eu-west, RTT 70 ms): what the link and the node cost by themselves', path: 'wan.raw.excess_ms.direct:small.eu-west', unit: 'ms' },
  { label: 'a fresh edge\'s first request to eu-west − a warm one (its connection opened ahead of need)', path: 'wan.raw.fresh_edge_first_request_excess_ms.eu-west', unit: 'ms' },
  { label: 'pinned: Node edge added TTFB p50 at concurrency 1', path: 'edge.raw.fair.pinned.edge_added_ttfb_p50_c1_ms', unit: 'ms' },
  { label: 'pinned: bare Hono passthrough added TTFB p50 at concurrency 1', path: 'edge.raw.fair.pinned.bare_added_ttfb_p50_c1_ms', unit: 'ms' },
  { label: 'pinned: Node edge added TTFB p99 at concurrency 64', path: 'edge.raw.fair.pinned.edge_added_ttfb_p99_c64_ms', unit: 'ms' },
  { label: 'pinned: bare Hono passthrough added TTFB p99 at concurrency 64', path: 'edge.raw.fair.pinned.bare_added_ttfb_p99_c64_ms', unit: 'ms' },
  { label: 'pinned: nginx added TTFB p99 at concurrency 64', path: 'edge.raw.fair.pinned.nginx_added_ttfb_p99_c64_ms', unit: 'ms' },
  { label: 'Node edge instructions per request, non-streaming 1 kB', path: 'edge.raw.fair.instructions.per_request.edge.non_streaming_1kb.median', unit: 'instr' },
  { label: 'bare Hono passthrough instructions per request, non-streaming 1 kB', path: 'edge.raw.fair.instructions.per_request.bare.non_streaming_1kb.median', unit: 'instr' },
  { label: "the same reaching its upstream over one h2c connection (as the edge reaches other regions' nodes)", path: 'edge.raw.fair.instructions.per_request.bare_h2.non_streaming_1kb.median', unit: 'instr' },
  { label: 'Node edge clock-driven instructions per second while serving (lease refills, registry refresh, latency batch writes)', path: 'edge.raw.fair.instructions.per_request.edge.non_streaming_1kb.clock_per_s', unit: 'instr/s' },
  { label: "Node edge ÷ bare passthrough instructions with the clock-driven work left in at callgrind's pace (the figure until 2026-12-02)", path: 'edge.raw.fair.instructions.edge_over_bare_with_clock.non_streaming_1kb', unit: '×' },
  { label: 'Node edge ÷ bare passthrough instructions, streaming 1 kB', path: 'edge.raw.fair.instructions.edge_over_bare.streaming_1kb', unit: '×' },
  { label: 'Node edge ÷ bare passthrough instructions, non-streaming 100 kB', path: 'edge.raw.fair.instructions.edge_over_bare.non_streaming_100kb', unit: '×' },
  { label: 'edge body check (decode + JSON.parse + zod) per 1 kB body', path: 'edge.raw.fair.instructions.body_check_per_call.full_1kb', unit: 'instr' },
  { label: 'edge body check (decode + JSON.parse + zod) per 100 kB body', path: 'edge.raw.fair.instructions.body_check_per_call.full_100kb', unit: 'instr' },
  { label: 'of which decode + JSON.parse, 100 kB body', path: 'edge.raw.fair.instructions.body_check_per_call.json_100kb', unit: 'instr' },
  { label: 'edge affinity key per 100 kB body', path: 'edge.raw.fair.instructions.body_check_per_call.affinity_100kb', unit: 'instr' },
  { label: 'edge request signature (SHA-256 of the body + HMAC) per 100 kB body, software SHA under valgrind', path: 'edge.raw.fair.instructions.body_check_per_call.sign_100kb', unit: 'instr' },
  { label: 'rate-limit check p99', path: 'ratelimit.raw.requests_check_ms.p99', unit: 'ms' },
]

function at(latest: Latest, path: string): unknown {
  let v: unknown = latest
  for (const part of path.split('.')) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[part] : undefined
  return v
}

export interface SectionRecord extends Omit<SectionResult, 'figures'> {
  [figure: string]: unknown
  measured_at: string
  quick: boolean
  machine: { load1_before: number; load1_after: number; cores: number }
  duration_s: number
  error?: string
}

export type Latest = Partial<Record<SectionName, SectionRecord>> & {
  generated_at?: string
  /** Every figure of the target table under its dotted key, with its target and verdict. */
  targets?: Array<{ key: string; value: number | null; target: string; result: string }>
}

/** The section record for latest.json: figures first, as top-level keys. */
export function sectionRecord(result: SectionResult, meta: Pick<SectionRecord, 'measured_at' | 'quick' | 'machine' | 'duration_s' | 'error'>): SectionRecord {
  const { figures, ...rest } = result
  return { ...figures, ...rest, ...meta } as SectionRecord
}

export function readLatest(path: string): Latest {
  if (!existsSync(path)) return {}
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Latest
  } catch {
    return {}
  }
}

function lookup(latest: Latest, dotted: string): number | null | undefined {
  const [section, key] = dotted.split('.') as [SectionName, string]
  const rec = latest[section]
  if (!rec) return undefined
  const v = rec[key]
  return typeof v === 'number' || v === null ? v : undefined
}

export interface Verdict {
  key: string
  label: string
  value: number | null | undefined
  display: string
  target: string
  result: 'pass' | 'miss' | 'reported' | 'not run' | 'failed'
}

export function verdicts(latest: Latest): Verdict[] {
  return TARGETS.map((t) => {
    const section = t.key.split('.')[0] as SectionName
    const value = lookup(latest, t.key)
    const target = t.kind === 'min' ? `≥ ${t.target}` : t.kind === 'max' ? `≤ ${t.target}` : t.kind === 'report' ? 'reported' : `all of ${t.of!.split('.')[1]}`
    if (value === undefined) return { key: t.key, label: t.label, value, display: '—', target, result: latest[section]?.error ? 'failed' : 'not run' }
    if (value === null || !Number.isFinite(value)) return { key: t.key, label: t.label, value: null, display: 'n/a', target, result: 'failed' }
    if (t.kind === 'all-of') {
      const of = lookup(latest, t.of!) ?? NaN
      return { key: t.key, label: t.label, value, display: `${value} / ${of}`, target: `${of} / ${of}`, result: value === of && of > 0 ? 'pass' : 'miss' }
    }
    const display = fmt(value)
    if (t.kind === 'report') return { key: t.key, label: t.label, value, display, target, result: 'reported' }
    const pass = t.kind === 'min' ? value >= t.target! : value <= t.target!
    return { key: t.key, label: t.label, value, display, target, result: pass ? 'pass' : 'miss' }
  })
}

function fmt(v: number): string {
  if (Math.abs(v) >= 100) return v.toFixed(0)
  if (Math.abs(v) >= 10) return v.toFixed(1)
  return v.toFixed(2)
}

export function markdownTable(latest: Latest): string {
  const rows = verdicts(latest)
  const lines = ['| figure (key in latest.json) | value | target | result |', '|---|---:|---:|:---:|']
  for (const r of rows) lines.push(`| ${r.label}<br>\`${r.key}\` | ${r.display} | ${r.target} | ${r.result === 'pass' ? '✅ pass' : r.result === 'miss' ? '❌ miss' : r.result} |`)
  lines.push('')
  lines.push('| for perspective (same run, no target) | value |')
  lines.push('|---|---:|')
  for (const c of CONTEXT) {
    const v = at(latest, c.path)
    lines.push(`| ${c.label} | ${typeof v === 'number' && Number.isFinite(v) ? `${fmt(v)} ${c.unit}` : '—'} |`)
  }
  lines.push('')
  lines.push('| section | measured | mode | load average (1 min) before → after, cores | took |')
  lines.push('|---|---|---|---|---:|')
  for (const s of SECTIONS) {
    const rec = latest[s]
    if (!rec) {
      lines.push(`| ${s} | not run | | | |`)
      continue
    }
    const m = rec.machine
    lines.push(`| ${s} | ${rec.measured_at} | ${rec.quick ? 'quick' : 'full'}${rec.error ? ' (failed: ' + oneLine(rec.error) + ')' : ''} | ${m.load1_before.toFixed(2)} → ${m.load1_after.toFixed(2)}, ${m.cores} | ${rec.duration_s.toFixed(0)} s |`)
  }
  return lines.join('\n')
}

function oneLine(s: string): string {
  return s.split('\n')[0].replace(/\|/g, '/').slice(0, 160)
}

export function latestMarkdown(latest: Latest): string {
  const notes = SECTIONS.flatMap((s) => (latest[s]?.notes ?? []).map((n) => `- ${s}: ${n}`))
  return [
    '# zerolayer benchmark — latest results',
    '',
    `Generated by \`npm run bench\` at ${latest.generated_at ?? new Date().toISOString()}. Every figure is a ratio or difference of two things measured in the same run (medians over rounds where the method says so); absolute numbers are in latest.json.`,
    '',
    markdownTable(latest),
    '',
    ...(notes.length ? ['Notes:', '', ...notes, ''] : []),
    '![throughput and p99 TTFT vs offered load](throughput-ttft.svg)',
    '',
  ].join('\n')
}

export const DOC_BEGIN = '<!-- bench:results:begin (generated by bench/run.ts; do not edit by hand) -->'
export const DOC_END = '<!-- bench:results:end -->'

export const PROFILE_BEGIN = '<!-- bench:edge-profile:begin (generated by bench/run.ts; do not edit by hand) -->'
export const PROFILE_END = '<!-- bench:edge-profile:end -->'

interface ProfileStage {
  stage: string
  share: number
  files: string[]
}

/** The edge's CPU by stage (edge.raw.fair.profile, bench/scenarios/edge-profile.ts) as a table. */
export function edgeProfileTable(latest: Latest): string {
  const profile = at(latest, 'edge.raw.fair.profile') as { requests: number; samples: number; stages: ProfileStage[] } | undefined
  if (!profile?.stages?.length) return '_No stage profile in the latest run (the edge section has not run with it)._'
  const lines = [
    `Measured ${latest.edge?.measured_at ?? ''} (${latest.edge?.quick ? 'quick' : 'full'} run): ${profile.requests} non-streaming 1 kB requests at concurrency 8, ${profile.samples} busy samples.`,
    '',
    '| stage | share of the edge\'s busy CPU | our files charged to it |',
    '|---|---:|---|',
  ]
  for (const s of profile.stages) lines.push(`| ${s.stage} | ${(s.share * 100).toFixed(1)} % | ${s.files.slice(0, 4).map((f) => `\`${f}\``).join(', ')} |`)
  return lines.join('\n')
}

/** Replaces the generated blocks of docs/PERFORMANCE.md (appends one whose markers are missing). */
export function rewriteDocsBlock(docPath: string, latest: Latest): void {
  let text = existsSync(docPath) ? readFileSync(docPath, 'utf8') : '# Performance\n\n'
  text = replaceBlock(text, DOC_BEGIN, DOC_END, [`Latest run: ${latest.generated_at ?? ''} (per-section time, mode and machine load below).`, '', markdownTable(latest)].join('\n'))
  text = replaceBlock(text, PROFILE_BEGIN, PROFILE_END, edgeProfileTable(latest))
  writeFileEnsuringDir(docPath, text)
}

function replaceBlock(text: string, begin: string, end: string, body: string): string {
  const block = [begin, '', body, '', end].join('\n')
  // Matched on the marker's fixed head, so a reworded "(generated by …)" note still matches.
  const b = text.indexOf(begin.slice(0, begin.indexOf(' (') > 0 ? begin.indexOf(' (') : 28))
  const e = text.indexOf(end)
  return b >= 0 && e > b ? text.slice(0, b) + block + text.slice(e + end.length) : `${text.trimEnd()}\n\n${block}\n`
}

export function writeFileEnsuringDir(path: string, content: string): void {
  mkdirSync(dirname(path), { recursive: true })
  writeFileSync(path, content)
}
