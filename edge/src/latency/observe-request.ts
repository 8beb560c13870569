/**
 * After every response ENDS (DESIGN.md §3 step 7, §8): one structured JSON log line, and for
 * generate requests one latency sample to the recorder, both in the background (`waitUntil`).
 *
 * The end of a node's body is the pass-through pipe settling (proxy/pass-through.ts: the body is
 * never parsed): complete, upstream broken, or the client gone (its cancel runs back through the
 * pipe). generate.ts hands that promise over as `forwarded`; a response the edge made itself
 * (a refusal, an error) ends as soon as it is produced.
 *
 * The log line carries ids, route, status, outcome, place, timing and tenant: never a key, a
 * prompt or a body.
 */
import type { Context } from 'hono'
import type { AppEnv, Around, Forwarded, LogLine, BodyOutcome } from '../context.ts'
import { LatencyBatchError } from './batching-recorder.ts'
import type { LatencyRecorder, LatencySample } from './latency-recorder.ts'
import { toOutcome } from './outcome.ts'

export interface ObserveOptions {
  recorder?: LatencyRecorder
  /** Paths whose requests become latency samples (the generate routes); every request is logged. */
  recordedPaths: ReadonlySet<string>
  /** This edge's location for a request (Cloudflare colo, else EDGE_REGION). */
  edgeOf: (req: Request) => string
  /** The per-request line; undefined: none (REQUEST_LOG=0). A failed record is logged either way. */
  log: LogLine | undefined
  now: () => number
}

export function observeRequests(opts: ObserveOptions): Around {
  return { after: (c) => observe(c, opts) }
}

function observe(c: Context<AppEnv>, opts: ObserveOptions): void {
  const producedAtMs = opts.now()
  const forwarded: Forwarded | undefined = c.get('forwarded')
  const ended = forwarded ? forwarded.finished : Promise.resolve<BodyOutcome>({ kind: 'complete', firstByteAtMs: producedAtMs })
  const facts = requestFacts(c, opts.edgeOf(c.req.raw), forwarded)
  const record = opts.recorder && opts.recordedPaths.has(facts.path) ? opts.recorder : undefined

  c.get('waitUntil')(
    ended.then((end) => {
      const endedAtMs = opts.now()
      // A body-less answer (or one the edge read whole, like an all-overloaded 503) starts when it is made.
      const firstByteAtMs = end.firstByteAtMs ?? (end.kind === 'complete' ? producedAtMs : undefined)
      // One literal of one shape, absent fields undefined: spreads of optional parts and an
      // Object.assign over them built it property by property (Node 20's V8, see routing/pick-node.ts).
      const sample: LatencySample = {
        requestId: facts.requestId,
        endedAtMs,
        edge: facts.edge,
        nodeRegion: facts.nodeRegion,
        model: facts.model,
        tenant: facts.tenant,
        status: facts.status,
        outcome: toOutcome(facts.status, end.kind, forwarded !== undefined),
        ttfbMs: firstByteAtMs === undefined ? undefined : Math.max(0, firstByteAtMs - facts.startedAtMs),
        totalMs: Math.max(0, endedAtMs - facts.startedAtMs),
        failovers: facts.failovers,
        affinity: facts.affinity,
      }
      const line = toLogLine(sample, facts)
      // A stream continued on other nodes after its node failed (x-zl-failover was already sent).
      if (end.resumes) line.resumes = end.resumes
      opts.log?.(line)
      return record ? recorded(record.record(sample), sample.requestId, opts.log ?? consoleError) : undefined
    }),
  )
}

/**
 * What waits for a sample's batch to be stored (the Node entry's batches are written once a
 * second): the request id alone. An async frame awaiting the write kept the sample, the log line
 * and the request's facts alive until then, up to a second after the response: at c64 on one core
 * they were 2.3 of the 4.3 MB that a sampling heap profile still found alive (0.2 of 3.0 MB since).
 */
function recorded(written: Promise<void>, requestId: string, warn: LogLine): Promise<void> {
  return written.catch((e: unknown) => warn(recordFailed(requestId, e)))
}

/**
 * The warning for a failed record: the error's name only (a message may hold a key or a Redis
 * command). A batch's write (batching-recorder.ts) fails for all its samples: with `ownerWrites`
 * only the owner logs, so the line says how many were lost and names the write's own error.
 */
export function recordFailed(requestId: string, e: unknown): Record<string, unknown> {
  const cause = e instanceof LatencyBatchError ? e.cause : e
  const line: Record<string, unknown> = { level: 'warn', msg: 'latency record failed', requestId, error: cause instanceof Error ? cause.name : typeof cause }
  if (e instanceof LatencyBatchError) line.samples = e.samples
  return line
}

/** What is known once the response exists (read now: the context is not used after the handler returns). */
function requestFacts(c: Context<AppEnv>, edge: string, forwarded: Forwarded | undefined) {
  const principal = c.get('principal') as AppEnv['Variables']['principal'] | undefined
  return {
    method: c.req.method,
    path: c.req.path,
    traceparent: c.get('traceparent'),
    startedAtMs: c.get('startedAtMs'),
    requestId: c.get('requestId'),
    edge,
    nodeRegion: forwarded?.nodeRegion,
    affinity: forwarded?.affinity,
    model: (c.get('generate') as AppEnv['Variables']['generate'] | undefined)?.gen.model,
    // The admin token is no tenant: its requests are counted under `all` only.
    tenant: principal && !principal.admin ? principal.tenant : undefined,
    status: c.res.status,
    failovers: forwarded?.failovers ?? 0,
  }
}

function toLogLine(s: LatencySample, req: { method: string; path: string; traceparent: string }): Record<string, unknown> {
  return {
    level: 'info',
    time: new Date(s.endedAtMs).toISOString(),
    msg: 'request',
    requestId: s.requestId,
    traceparent: req.traceparent,
    method: req.method,
    route: req.path,
    status: s.status,
    outcome: s.outcome,
    edge: s.edge,
    region: s.nodeRegion ?? null,
    model: s.model ?? null,
    tenant: s.tenant ?? null,
    ttfbMs: s.ttfbMs ?? null,
    durationMs: s.totalMs,
    failovers: s.failovers,
    affinity: s.affinity ?? null,
  }
}

/** One JSON object per line on stdout: what Workers Logs and log shippers index. */
export const consoleLog: LogLine = (line) => console.log(JSON.stringify(line))
const consoleError: LogLine = (line) => console.error(JSON.stringify(line))
