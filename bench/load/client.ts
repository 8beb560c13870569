/**
 * One request of the load generator, over undici's dispatcher API (`undici.request`: the same
 * HTTP client fetch() is built on, minus the WHATWG stream layer, so the client costs less of the
 * shared CPU than it measures). Records what the benchmark reports per request: status, time to
 * first body byte (TTFB), time to first generated text (TTFT), the gaps between text frames,
 * total time and completion tokens.
 */
import { performance } from 'node:perf_hooks'
import { Agent, request, type Dispatcher } from 'undici'
import { DIALECT_PATH, buildBody, jsonCompletionTokens, readFrame, type BenchDialect, type BodyOptions } from './dialects.ts'

export interface RequestSpec {
  /** `http://127.0.0.1:port` */
  origin: string
  dialect: BenchDialect
  body: Uint8Array
  stream: boolean
  headers?: Record<string, string>
  dispatcher?: Dispatcher
  /** An outside abort (a generator's deadline): the request ends, recorded as `cutOff`. */
  signal?: AbortSignal
  /** Cancellation scenario: hang up after this many text frames. */
  abortAfterTextFrames?: number
  /** Hard bound on the whole request (default 120 s). */
  timeoutMs?: number
  /** Keep the generated text (a multi-turn client sends it back). */
  captureText?: boolean
}

export interface RequestRecord {
  /** performance.now() when the request was sent. */
  startMs: number
  /** HTTP status; 0 when no response arrived. */
  status: number
  headersMs?: number
  /** First response body byte. */
  ttfbMs?: number
  /** First frame carrying generated text (streams) / the whole body (JSON). */
  ttftMs?: number
  totalMs: number
  /** Completion tokens: the server's usage count when it sent one, else text frames. */
  tokens: number
  textFrames: number
  /** The generated text, when captureText was set (streams). */
  text?: string
  /** Prompt tokens the server reused from its prefix cache, when it said. */
  cachedTokens?: number
  /** Prompt tokens as the server counted them, when it said. */
  promptTokens?: number
  /** The Responses API's id of the answer, when it said. */
  responseId?: string
  /** Gaps between consecutive text frames, ms. */
  gapsMs: number[]
  error?: string
  /** We hung up on purpose (abortAfterTextFrames). */
  clientAborted?: boolean
  /** Ended by the outside signal (deadline) before completing. */
  cutOff?: boolean
  /** The response's server-timing header (the edge reports its own time and the upstream's). */
  serverTiming?: string
  /** The edge's cache-affine routing decision (x-zl-affinity). */
  affinity?: string
  /** The retry hint of a refusal (retry-after-ms), when it carried one. */
  retryAfterMs?: number
}

/**
 * A keep-alive agent for a benchmark client: no body/header timeouts (streams are gappy),
 * unlimited connections. An idle connection is reused for as long as the server says (Keep-Alive:
 * timeout=, up to keepAliveMaxTimeout), else for undici's own default of 4 s, as Node's fetch and
 * both SDKs do: workerd closes an idle client connection after 5 s without saying so, and with 60 s
 * the client reused connections workerd was closing (29 of 36,458 requests of a 240 s
 * bench/overload.ts run got a reset, 19 of them in one burst).
 */
export function benchAgent(opts: { connections?: number } = {}): Agent {
  return new Agent({
    keepAliveTimeout: 4_000,
    keepAliveMaxTimeout: 600_000,
    headersTimeout: 0,
    bodyTimeout: 0,
    pipelining: 1,
    ...(opts.connections ? { connections: opts.connections } : {}),
  })
}

/** One streaming OpenAI completion of exactly `maxTokens` tokens (ignore_eos), sent straight to a node. */
export function streamCompletion(
  origin: string,
  model: string,
  text: string,
  maxTokens: number,
  opts: Pick<RequestSpec, 'dispatcher' | 'headers' | 'captureText' | 'signal'> & Pick<BodyOptions, 'sampling'> = {},
): Promise<RequestRecord> {
  const { sampling, ...spec } = opts
  return sendRequest({ origin, dialect: 'openai-completions', body: buildBody('openai-completions', { model, text, maxTokens, stream: true, ignoreEos: true, ...(sampling ? { sampling } : {}) }), stream: true, ...spec })
}

export async function sendRequest(spec: RequestSpec): Promise<RequestRecord> {
  const ctrl = new AbortController()
  const onOuter = () => ctrl.abort(new Error('cut off'))
  spec.signal?.addEventListener('abort', onOuter, { once: true })
  const timer = setTimeout(() => ctrl.abort(new Error('client timeout')), spec.timeoutMs ?? 120_000)
  const rec: RequestRecord = { startMs: performance.now(), status: 0, totalMs: 0, tokens: 0, textFrames: 0, gapsMs: [] }
  const since = () => performance.now() - rec.startMs
  let usageTokens: number | undefined
  try {
    if (spec.signal?.aborted) throw new Error('cut off')
    const res = await request(spec.origin + DIALECT_PATH[spec.dialect], {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...spec.headers },
      body: spec.body,
      signal: ctrl.signal,
      ...(spec.dispatcher ? { dispatcher: spec.dispatcher } : {}),
    })
    rec.status = res.statusCode
    rec.headersMs = since()
    if (res.headers['server-timing']) rec.serverTiming = String(res.headers['server-timing'])
    if (res.headers['x-zl-affinity']) rec.affinity = String(res.headers['x-zl-affinity'])
    if (res.headers['retry-after-ms']) rec.retryAfterMs = Number(res.headers['retry-after-ms'])
    const contentType = String(res.headers['content-type'] ?? '')
    if (!spec.stream || res.statusCode !== 200 || !contentType.startsWith('text/event-stream')) {
      const chunks: Buffer[] = []
      for await (const chunk of res.body) {
        rec.ttfbMs ??= since()
        chunks.push(chunk as Buffer)
      }
      const text = Buffer.concat(chunks).toString('utf8')
      if (res.statusCode === 200) {
        rec.ttftMs = since()
        try {
          usageTokens = jsonCompletionTokens(spec.dialect, JSON.parse(text))
        } catch {
          rec.error = 'non-JSON body'
        }
      } else {
        rec.error = `HTTP ${res.statusCode}: ${text.slice(0, 160)}`
      }
    } else {
      const decoder = new TextDecoder()
      let buf = ''
      let lastTextAt = 0
      reading: for await (const chunk of res.body) {
        const t = since()
        rec.ttfbMs ??= t
        buf += decoder.decode(chunk as Buffer, { stream: true })
        let end: number
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const raw = buf.slice(0, end)
          buf = buf.slice(end + 2)
          let event: string | undefined
          const data: string[] = []
          for (const line of raw.split('\n')) {
            if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
            else if (line.startsWith('event:')) event = line.slice(6).trim()
          }
          const m = readFrame(spec.dialect, event, data.join('\n'))
          if (m.error) rec.error = m.error
          if (m.usageTokens !== undefined) usageTokens = m.usageTokens
          if (m.cachedTokens !== undefined) rec.cachedTokens = m.cachedTokens
          if (m.promptTokens !== undefined) rec.promptTokens = m.promptTokens
          if (m.responseId !== undefined) rec.responseId = m.responseId
          if (m.text) {
            rec.textFrames++
            if (spec.captureText) rec.text = (rec.text ?? '') + m.text
            if (rec.ttftMs === undefined) rec.ttftMs = t
            else rec.gapsMs.push(t - lastTextAt)
            lastTextAt = t
            if (spec.abortAfterTextFrames !== undefined && rec.textFrames >= spec.abortAfterTextFrames) {
              rec.clientAborted = true
              ctrl.abort(new Error('client hung up'))
              break reading
            }
          }
        }
      }
    }
  } catch (e) {
    if (!rec.clientAborted) {
      if (spec.signal?.aborted) rec.cutOff = true
      else rec.error = e instanceof Error ? e.message : String(e)
    }
  } finally {
    clearTimeout(timer)
    spec.signal?.removeEventListener('abort', onOuter)
  }
  rec.totalMs = since()
  rec.tokens = usageTokens ?? rec.textFrames
  return rec
}
