/**
 * The three generate routes, one flow: bounded body → edge signature → JSON → dialect parse →
 * model check → tokens → context budget → engine.submit → stream (SSE) or collect (JSON).
 * The engine is only submitted to and aborted; everything it says comes back as events.
 */
import { randomUUID } from 'node:crypto'
import { clipText } from '../../../shared/src/clip-text.ts'
import { ApiError, API_ERROR_CODES, type ApiErrorCode } from '../../../shared/src/api-error.ts'
import type { DialectCodec, ResponseMeta } from '../../../shared/src/dialects/index.ts'
import { isCompletedReason } from '../../../shared/src/generation.ts'
import { parseJsonBody } from '../../../shared/src/json-body.ts'
import { resolveSampling, type GenerateRequest, type OutputConstraint } from '../../../shared/src/generation.ts'
import { resumeIdLine, resumeSignedExtra } from '../../../shared/src/resume-wire.ts'
import type { EngineEvent, EngineHandle, EngineRequest, SubmitResult } from '../engine/types.ts'
import type { PromptEncoder } from '../model/prompt-encoder.ts'
import type { SignatureCheck } from './edge-signature.ts'
import { DRAINING_RETRY_AFTER_MS, type NodeState } from './node-state.ts'
import { readBody } from './read-body.ts'
import { headerValue, type RequestContext } from './request-context.ts'
import { readResumeAsk, type ResumeAsk } from './resume-request.ts'
import { sendError, sendJson } from './respond.ts'
import { SseStream } from './sse-stream.ts'
import { resolveMaxTokens } from './token-budget.ts'

export interface GenerateDeps {
  encoder: PromptEncoder
  engine: EngineHandle
  state: NodeState
  checkSignature: SignatureCheck
  maxBodyBytes: number
  keepAliveMs: number
  /** Engine ids of requests not yet finished: a reused x-request-id must not collide in the engine. */
  inFlight: Set<string>
}

/** A validated request turned into what the engine runs, plus what the response needs. */
interface Prepared {
  gen: GenerateRequest
  engineReq: EngineRequest
  meta: ResponseMeta
  /** Completions `echo`: the prompt is sent as the first text. */
  echoText: string
  resume: ResumeAsk
}

/** Answers one generate request; throws ApiError (or anything) before the response started. */
export async function handleGenerate(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps): Promise<void> {
  if (deps.state.draining) throw drainingError()
  const body = await readBody(ctx.req, deps.maxBodyBytes)
  const signed = await deps.checkSignature({
    method: ctx.req.method ?? 'POST',
    path: ctx.path,
    requestId: ctx.requestIdHeader,
    signatureHeader: ctx.wire.signature,
    body,
    extra: resumeSignedExtra((name) => headerValue(ctx.req, name)),
  })
  const prepared = prepare(ctx, codec, deps, parseJsonBody(body), readResumeAsk(ctx.req))
  // Cached KV is shared only within a tenant (vLLM's cache_salt): a shared cache would let one
  // tenant learn from timing whether another sent a prompt. Only a tenant the edge vouches for
  // (a verified signature) salts; direct unsigned use shares one salt.
  if (signed && ctx.wire.tenant) prepared.engineReq.cacheSalt = ctx.wire.tenant
  if (prepared.engineReq.constraint) await compileConstraint(deps, prepared.engineReq.constraint)
  if (ctx.clientGone) {
    // Gone while we verified and tokenized: nothing to run, nothing to answer.
    ctx.outcome.errorCode = 'client_aborted'
    ctx.timer.fail('client_aborted')
    return
  }
  if (prepared.gen.stream) runStreaming(ctx, codec, deps, prepared)
  else runCollecting(ctx, codec, deps, prepared)
}

function prepare(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps, json: unknown, resume: ResumeAsk): Prepared {
  const gen = codec.parse(json)
  const { encoder } = deps
  if (gen.model !== encoder.modelId) {
    throw new ApiError('model_not_found', `The model '${clipText(gen.model)}' does not exist on this node; it serves '${encoder.modelId}'.`, { param: 'model' })
  }
  const promptTokens = gen.input.kind === 'chat' ? encoder.encodeChat(gen.input.messages) : encoder.encodeText(gen.input.prompt)
  ctx.outcome.promptTokens = promptTokens.length
  const maxTokens = resolveMaxTokens(codec, promptTokens.length, gen.maxTokens, encoder.contextLength, encoder.defaults.maxNewTokens)
  const engineReq: EngineRequest = {
    id: engineId(ctx.requestId, deps.inFlight),
    promptTokens,
    maxTokens,
    stop: gen.stop,
    sampling: resolveSampling(gen.sampling, encoder.defaults.sampling),
    priority: ctx.wire.priority,
  }
  if (ctx.wire.deadlineMs !== undefined) engineReq.deadlineMs = ctx.wire.deadlineMs
  if (gen.ignoreEos) engineReq.ignoreEos = true
  if (gen.constraint) engineReq.constraint = gen.constraint
  // The edge's seed applies only where the client gave none: a client's own seed always wins.
  if (resume.seed !== undefined && engineReq.sampling.seed === undefined) engineReq.sampling = { ...engineReq.sampling, seed: resume.seed }
  // Only a stream is continued: a JSON answer is simply asked again from scratch.
  if (gen.stream && resume.resume) {
    engineReq.resumeTokens = resume.resume.tokens
    if (resume.resume.flushed) engineReq.resumeFlushed = true
  }
  const meta: ResponseMeta = { requestId: ctx.requestId, model: gen.model, created: Math.floor(Date.now() / 1000) }
  const echoText = gen.echo && gen.input.kind === 'text' ? gen.input.prompt : ''
  return { gen, engineReq, meta, echoText, resume }
}

/**
 * A constraint's grammar is compiled before the request is admitted, so one the engine cannot
 * compile is a 400 before any response starts (and never a failed step for the batch). The
 * engine's own reason is not passed on: it may quote the schema.
 */
async function compileConstraint(deps: GenerateDeps, constraint: OutputConstraint): Promise<void> {
  try {
    await deps.engine.prepare(constraint)
  } catch (e) {
    const param = constraint.kind === 'json_schema' ? 'response_format.json_schema.schema' : 'response_format'
    throw new ApiError('invalid_request', `'${param}' could not be compiled into a grammar for this model.`, { param, cause: e })
  }
}

function runStreaming(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps, p: Prepared): void {
  const encoder = codec.streamEncoder(Object.assign({}, p.meta, { promptTokens: p.engineReq.promptTokens.length, includeUsage: p.gen.includeUsage }))
  const stream = new SseStream(ctx.req, ctx.res, () => abortForClient(ctx, deps, p.engineReq.id, () => ctx.res.destroy()))
  let firstText = true
  const continuing = p.engineReq.resumeTokens !== undefined
  const release = submit(ctx, deps, p.engineReq, (event) => {
    if (event.type === 'text') {
      if (firstText) stream.stopKeepAlive()
      firstText = false
      const frame = encoder.text(event.text)
      // The id line rides at the head of the frame: the edge counts a frame delivered only whole.
      stream.write(p.resume.resumable && frame !== '' ? resumeIdLine(event.completionTokens, event.tokens, event.flush === true) + frame : frame)
      return
    }
    if (isCompletedReason(event.reason)) stream.end(encoder.finish(event.reason, event.usage, event.stopSequence))
    else stream.end(encoder.error(engineFailure(event)))
  })
  // Reached only when the engine admitted the request: now the status is known to be 200.
  // A continuation's client already has the preamble (role chunk, message_start, echo).
  stream.open({ 'x-request-id': ctx.requestId }, continuing ? '' : encoder.start())
  if (p.echoText && !continuing) stream.write(encoder.text(p.echoText))
  stream.startKeepAlive(deps.keepAliveMs)
  ctx.onClientGone(() => stream.stopKeepAlive())
  release()
}

function runCollecting(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps, p: Prepared): void {
  const parts: string[] = [p.echoText]
  const release = submit(ctx, deps, p.engineReq, (event) => {
    if (event.type === 'text') {
      parts.push(event.text)
      return
    }
    const headers = { 'x-request-id': ctx.requestId }
    if (isCompletedReason(event.reason)) {
      sendJson(ctx.req, ctx.res, 200, codec.jsonBody(p.meta, parts.join(''), event.reason, event.usage, event.stopSequence), headers)
    } else {
      sendError(ctx.req, ctx.res, codec, engineFailure(event), headers)
    }
  })
  release()
}

/**
 * Submits and wires the request's lifecycle: timing and outcome on every event, the engine id
 * released on finish, and `engine.abort` exactly once if the client leaves first. Throws the
 * overload answer when the engine refuses. Events are held until the caller has opened its
 * response and calls the returned `release` (an engine may emit before submit() returns).
 */
function submit(ctx: RequestContext, deps: GenerateDeps, req: EngineRequest, handle: (e: EngineEvent) => void): () => void {
  let held: EngineEvent[] | undefined = []
  const deliver = (event: EngineEvent) => {
    if (ctx.clientGone) return
    record(ctx, event)
    handle(event)
  }
  const onEvent = (event: EngineEvent) => {
    if (event.type === 'finish') deps.inFlight.delete(req.id)
    if (held) held.push(event)
    else deliver(event)
  }
  deps.inFlight.add(req.id)
  const result = deps.engine.submit(req, onEvent)
  if (!result.ok) {
    deps.inFlight.delete(req.id)
    throw overloadError(result)
  }
  ctx.onClientGone(() => abortForClient(ctx, deps, req.id))
  return () => {
    const events = held ?? []
    held = undefined
    for (const event of events) deliver(event)
  }
}

/** Idempotent: the first caller aborts the engine request and records client_aborted. */
function abortForClient(ctx: RequestContext, deps: GenerateDeps, id: string, then?: () => void): void {
  if (ctx.outcome.finishReason !== undefined) return
  ctx.outcome.finishReason = 'abort'
  ctx.outcome.errorCode = 'client_aborted'
  ctx.timer.fail('client_aborted')
  deps.engine.abort(id)
  then?.()
}

function record(ctx: RequestContext, event: EngineEvent): void {
  if (event.type === 'text') {
    ctx.timer.onText(event.completionTokens)
    ctx.outcome.completionTokens = event.completionTokens
    return
  }
  const code = isCompletedReason(event.reason) ? undefined : engineFailure(event).code
  ctx.timer.finish(event.reason, event.usage, code)
  ctx.outcome.finishReason = event.reason
  ctx.outcome.completionTokens = event.usage.completionTokens
  if (code) ctx.outcome.errorCode = code
}

/** The engine's own failure codes in ApiError terms; anything unknown is a fixed 500. */
function engineFailure(event: Extract<EngineEvent, { type: 'finish' }>): ApiError {
  const code = event.error?.code
  if (code === 'deadline_exceeded') return new ApiError('timeout', 'The request was dropped: its deadline passed before it could finish.')
  // Cancelled by the node itself (e.g. shutting down), not by this client: worth a retry elsewhere.
  if (event.reason === 'abort' && code === undefined) return new ApiError('overloaded', 'The node cancelled the request before it finished; please retry.')
  if (code !== undefined && code !== 'internal' && (API_ERROR_CODES as readonly string[]).includes(code)) {
    return new ApiError(code as ApiErrorCode, 'The request could not be completed.')
  }
  return new ApiError('internal', 'The server had an error while processing your request.')
}

function overloadError(result: Exclude<SubmitResult, { ok: true }>): ApiError {
  if (result.code === 'draining') return drainingError(result.retryAfterMs)
  return new ApiError('overloaded', 'This node is at capacity; please retry shortly.', { retryAfterMs: result.retryAfterMs })
}

function drainingError(retryAfterMs = DRAINING_RETRY_AFTER_MS): ApiError {
  return new ApiError('overloaded', 'This node is draining (shutting down); please retry.', { retryAfterMs })
}

function engineId(requestId: string, inFlight: ReadonlySet<string>): string {
  return inFlight.has(requestId) ? `${requestId}~${randomUUID()}` : requestId
}
