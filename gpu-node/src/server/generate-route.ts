/**
 * The three generate routes, one flow: bounded body → edge signature → JSON → dialect parse →
 * model check → tokens → context budget → engine.submit → stream (SSE) or collect (JSON).
 * The engine is only submitted to and aborted; everything it says comes back as events.
 */
import { clipText } from '../../../shared/src/clip-text.ts'
import { ApiError, API_ERROR_CODES, type ApiErrorCode } from '../../../shared/src/api-error.ts'
import type { DialectCodec, ResponseMeta } from '../../../shared/src/dialects/index.ts'
import { isCompletedReason, resolveSampling, type ChoiceOutput, type GenerateRequest, type OutputConstraint } from '../../../shared/src/generation.ts'
import { parseJsonBody } from '../../../shared/src/json-body.ts'
import { resumeSignedExtra } from '../../../shared/src/resume-wire.ts'
import { parseSupersedeKey, SUPERSEDE_AT_HEADER, SUPERSEDE_HEADER, supersededError } from '../../../shared/src/supersede.ts'
import { toolCallFormat } from '../structured/tool-call-format.ts'
import { ToolCallParser } from '../structured/tool-call-parser.ts'
import { AnswerChoice } from './answer-choice.ts'
import { choiceRequests, Ended, uniqueId } from './choices.ts'
import { toolCallId, toolCalling } from './tool-calling.ts'
import { CompileBudgetError } from '../structured/compile-trial.ts'
import type { EngineEvent, EngineHandle, EngineRequest, SubmitResult } from '../engine/types.ts'
import type { PromptEncoder } from '../model/prompt-encoder.ts'
import type { SignatureCheck } from './edge-signature.ts'
import type { ResponsesStore } from '../../../shared/src/dialects/responses-store.ts'
import { readStoredTurn, type KeepAnswer } from './stored-turn.ts'
import { DRAINING_RETRY_AFTER_MS, type NodeState } from './node-state.ts'
import { readBody } from './read-body.ts'
import { headerValue, type RequestContext } from './request-context.ts'
import type { SupersedeTicket, Supersessions } from './supersessions.ts'
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
  /** Stored responses (the Redis the edge reads them from); without it nothing is kept. */
  responses?: ResponsesStore
  /** A stored response could not be written (logged without its content). */
  onKeepFailed?: (e: unknown) => void
  /** Running requests by supersede group (x-zl-supersede). */
  supersessions: Supersessions
}

/** A validated request turned into what the engine runs, plus what the response needs. */
interface Prepared {
  gen: GenerateRequest
  /** One per choice (OpenAI `n`), in choice order. */
  engineReqs: EngineRequest[]
  meta: ResponseMeta
  /** Completions `echo`: the prompt is sent as the first text. */
  echoText: string
  resume: ResumeAsk
  choices: AnswerChoice[]
  /** The answer may hold tool calls (the request offered tools and did not choose `none`). */
  calls: boolean
  /** Keeps the finished answer before its end is sent (a stored conversation's turn). */
  keep?: KeepAnswer
  /** Its place in its supersede group, when it named one. */
  ticket?: SupersedeTicket
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
  const json = parseJsonBody(body)
  const resume = readResumeAsk(ctx.req)
  // Only a tenant the edge vouches for (a verified signature) salts the cache and has a store.
  const tenant = signed && ctx.wire.tenant ? ctx.wire.tenant : undefined
  const turn = await readStoredTurn(codec, json, codec.parse(json), { tenant, store: deps.responses, onKeepFailed: deps.onKeepFailed })
  const prepared = prepare(ctx, codec, deps, turn.gen, resume, turn.keep)
  // Cached KV is shared only within a tenant (vLLM's cache_salt): a shared cache would let one
  // tenant learn from timing whether another sent a prompt; direct unsigned use shares one salt.
  if (tenant) for (const req of prepared.engineReqs) req.cacheSalt = tenant
  const constraint = prepared.engineReqs[0]!.constraint
  if (constraint) await compileConstraint(deps, constraint, prepared.gen.constraintParam)
  const supersede = parseSupersedeKey(headerValue(ctx.req, SUPERSEDE_HEADER))
  if (ctx.clientGone) {
    // Gone while we verified and tokenized: nothing to run, nothing to answer.
    ctx.outcome.errorCode = 'client_aborted'
    ctx.timer.fail('client_aborted')
    return
  }
  if (supersede !== undefined) {
    // The edge's receive time orders a key's requests across nodes; a direct request has none.
    const at = signed ? Number(headerValue(ctx.req, SUPERSEDE_AT_HEADER)) : NaN
    const ticket = deps.supersessions.arrive(tenant ?? '', supersede, Number.isFinite(at) && at > 0 ? at : undefined)
    prepared.ticket = ticket
    ctx.res.once('close', () => ticket.leave())
  }
  if (prepared.gen.stream) runStreaming(ctx, codec, deps, prepared)
  else runCollecting(ctx, codec, deps, prepared)
}

function prepare(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps, gen: GenerateRequest, resume: ResumeAsk, keep?: KeepAnswer): Prepared {
  const { encoder } = deps
  if (gen.model !== encoder.modelId) {
    throw new ApiError('model_not_found', `The model '${clipText(gen.model)}' does not exist on this node; it serves '${encoder.modelId}'.`, { param: 'model' })
  }
  const { input } = gen
  const promptTokens = input.kind === 'chat' ? encoder.encodeChat(input.messages, gen.tools?.tools) : input.suffix !== undefined ? encoder.encodeInfill(input.prompt, input.suffix) : encoder.encodeText(input.prompt)
  ctx.outcome.promptTokens = promptTokens.length
  const maxTokens = resolveMaxTokens(codec, promptTokens.length, gen.maxTokens, encoder.contextLength, encoder.defaults.maxNewTokens)
  const engineReq: EngineRequest = {
    id: uniqueId(ctx.requestId, deps.inFlight),
    promptTokens,
    maxTokens,
    stop: gen.stop,
    sampling: resolveSampling(gen.sampling, encoder.defaults.sampling),
    priority: ctx.wire.priority,
  }
  if (ctx.wire.deadlineMs !== undefined) engineReq.deadlineMs = ctx.wire.deadlineMs
  if (gen.ignoreEos) engineReq.ignoreEos = true
  const calls = toolCalling(gen.tools, encoder.toolCallFormat)
  const constraint = gen.constraint ?? calls?.constraint
  if (constraint) engineReq.constraint = constraint
  if (gen.logprobs) engineReq.logprobs = gen.logprobs
  // The edge's seed applies only where the client gave none: a client's own seed always wins.
  if (resume.seed !== undefined && engineReq.sampling.seed === undefined) engineReq.sampling = { ...engineReq.sampling, seed: resume.seed }
  // Only a stream is continued: a JSON answer is simply asked again from scratch.
  if (gen.stream && resume.resume) {
    engineReq.resumeTokens = resume.resume.tokens
    if (resume.resume.flushed) engineReq.resumeFlushed = true
  }
  const meta: ResponseMeta = { requestId: ctx.requestId, model: gen.model, created: Math.floor(Date.now() / 1000) }
  if (gen.responseEcho) meta.echo = gen.responseEcho
  const echoText = gen.echo && gen.input.kind === 'text' ? gen.input.prompt : ''
  const format = calls ? toolCallFormat(encoder.toolCallFormat) : undefined
  const choices = Array.from({ length: gen.n ?? 1 }, (_, i) => {
    const parser = format ? new ToolCallParser(format, (call) => toolCallId(codec, ctx.requestId, i, call)) : undefined
    return new AnswerChoice(i, parser, gen.logprobs !== undefined, !gen.stream || keep !== undefined)
  })
  const prepared: Prepared = { gen, engineReqs: choiceRequests(engineReq, choices.length, deps.inFlight), meta, echoText, resume, choices, calls: calls !== undefined }
  if (keep) prepared.keep = keep
  return prepared
}

/**
 * A constraint's grammar is compiled before the request is admitted, so one the engine cannot
 * compile is a 400 before any response starts (and never a failed step for the batch). The
 * engine's own reason is not passed on: it may quote the schema.
 */
async function compileConstraint(deps: GenerateDeps, constraint: OutputConstraint, given?: string): Promise<void> {
  try {
    await deps.engine.prepare(constraint)
  } catch (e) {
    const param = constraint.kind === 'tool_calls' ? 'tools' : given ?? (constraint.kind === 'json_schema' ? 'response_format.json_schema.schema' : 'response_format')
    if (e instanceof CompileBudgetError) {
      throw new ApiError('invalid_request', `'${param}' takes longer than ${e.budgetMs} ms to compile into a grammar for this model; simplify it (fewer properties, shorter bounded strings and arrays).`, { param, cause: e })
    }
    throw new ApiError('invalid_request', `'${param}' could not be compiled into a grammar for this model.`, { param, cause: e })
  }
}

function runStreaming(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps, p: Prepared): void {
  const first = p.engineReqs[0]!
  const encoder = codec.streamEncoder(Object.assign({}, p.meta, { promptTokens: first.promptTokens.length, includeUsage: p.gen.includeUsage, choices: p.choices.length, tools: p.calls }))
  const ids = p.engineReqs.map((r) => r.id)
  const stream = new SseStream(ctx.req, ctx.res, () => abortForClient(ctx, deps, ids, () => ctx.res.destroy()))
  let firstText = true
  const continuing = first.resumeTokens !== undefined
  const ended = new Ended(p.choices.length)
  const release = submitAll(ctx, deps, p.engineReqs, (choice, event) => {
    const answer = p.choices[choice]!
    if (event.type === 'text') {
      if (firstText && !event.replayed) stream.stopKeepAlive()
      if (!event.replayed) firstText = false
      const frames = answer.frames(event, encoder, p.resume.resumable)
      if (frames !== '') stream.write(frames)
      return
    }
    if (!isCompletedReason(event.reason)) return stream.end(encoder.error(engineFailure(event)))
    const usage = ended.add(event.usage)
    const reason = answer.reason(event.reason)
    const finish = () => answer.finishFrames(encoder, reason, usage, event.stopSequence)
    if (!ended.all) return stream.write(finish())
    if (!p.keep) return stream.end(finish())
    // Kept before the end is sent: a client that continues at once finds it.
    void p.keep(p.meta, [answer.result(reason, event.stopSequence)], usage).then(() => stream.end(finish()))
  })
  // Reached only when the engine admitted the request: now the status is known to be 200.
  // A continuation's client already has the preamble (role chunk, message_start, echo).
  stream.open({ 'x-request-id': ctx.requestId }, continuing ? '' : encoder.start())
  if (p.echoText && !continuing) stream.write(encoder.text(p.echoText))
  stream.startKeepAlive(deps.keepAliveMs)
  ctx.onClientGone(() => stream.stopKeepAlive())
  p.ticket?.onSuperseded(() => endSuperseded(ctx, deps, ids, () => stream.end(encoder.error(supersededError()))))
  release()
}

function runCollecting(ctx: RequestContext, codec: DialectCodec, deps: GenerateDeps, p: Prepared): void {
  if (p.echoText) for (const choice of p.choices) choice.collect({ type: 'text', text: p.echoText, completionTokens: 0, tokens: [] })
  const ended = new Ended(p.choices.length)
  const results: ChoiceOutput[] = []
  let failed = false
  const release = submitAll(ctx, deps, p.engineReqs, (choice, event) => {
    const answer = p.choices[choice]!
    if (event.type === 'text') return answer.collect(event)
    if (failed) return
    const headers = { 'x-request-id': ctx.requestId }
    if (!isCompletedReason(event.reason)) {
      failed = true
      return sendError(ctx.req, ctx.res, codec, engineFailure(event), headers)
    }
    const usage = ended.add(event.usage)
    results[choice] = answer.result(answer.reason(event.reason), event.stopSequence)
    if (!ended.all) return
    const send = () => sendJson(ctx.req, ctx.res, 200, codec.jsonBody(p.meta, results, usage), headers)
    if (p.keep) void p.keep(p.meta, results, usage).then(send)
    else send()
  })
  p.ticket?.onSuperseded(() => endSuperseded(ctx, deps, p.engineReqs.map((r) => r.id), () => sendError(ctx.req, ctx.res, codec, supersededError(), { 'x-request-id': ctx.requestId })))
  release()
}

/**
 * Submits every choice's request and wires the lifecycle: timing and outcome from the events (the
 * first choice's text, the last finish), engine ids released on finish, and `engine.abort` of
 * every choice exactly once if the client leaves first or one choice fails. Throws the overload
 * answer when the engine refuses any (those already admitted are aborted). Events are held until
 * the caller has opened its response and calls the returned `release` (an engine may emit before
 * submit() returns).
 */
function submitAll(ctx: RequestContext, deps: GenerateDeps, reqs: EngineRequest[], handle: (choice: number, e: EngineEvent) => void): () => void {
  let held: Array<[number, EngineEvent]> | undefined = []
  const ids = reqs.map((r) => r.id)
  let finished = 0
  let failed = false
  const deliver = (choice: number, event: EngineEvent) => {
    if (ctx.clientGone || ctx.outcome.errorCode === 'superseded') return
    if (event.type === 'finish') {
      finished++
      if (!isCompletedReason(event.reason) && !failed) {
        failed = true
        // One choice failed: the answer has failed; the others stop too.
        for (const id of ids) if (id !== reqs[choice]!.id) deps.engine.abort(id)
        record(ctx, event)
        return handle(choice, event)
      }
      if (failed) return
      if (finished === reqs.length) record(ctx, event)
    } else if (choice === 0 && !event.replayed) record(ctx, event)
    handle(choice, event)
  }
  const admitted: string[] = []
  reqs.forEach((req, choice) => {
    const onEvent = (event: EngineEvent) => {
      if (event.type === 'finish') deps.inFlight.delete(req.id)
      if (held) held.push([choice, event])
      else deliver(choice, event)
    }
    deps.inFlight.add(req.id)
    const result = deps.engine.submit(req, onEvent)
    if (!result.ok) {
      deps.inFlight.delete(req.id)
      for (const id of admitted) deps.engine.abort(id)
      throw overloadError(result)
    }
    admitted.push(req.id)
  })
  ctx.onClientGone(() => abortForClient(ctx, deps, ids))
  return () => {
    const events = held ?? []
    held = undefined
    for (const [choice, event] of events) deliver(choice, event)
  }
}

/** Idempotent: the first caller aborts the engine requests and records client_aborted. */
function abortForClient(ctx: RequestContext, deps: GenerateDeps, ids: readonly string[], then?: () => void): void {
  if (ctx.outcome.finishReason !== undefined) return
  ctx.outcome.finishReason = 'abort'
  ctx.outcome.errorCode = 'client_aborted'
  ctx.timer.fail('client_aborted')
  for (const id of ids) deps.engine.abort(id)
  then?.()
}

/**
 * Idempotent, and only while the answer is still running: a newer request of its supersede group
 * arrived. The engine requests are aborted (their KV freed within two steps) and the response
 * ends with the dialect's `superseded` error; the engine's later events are dropped.
 */
function endSuperseded(ctx: RequestContext, deps: GenerateDeps, ids: readonly string[], end: () => void): void {
  if (ctx.outcome.finishReason !== undefined || ctx.clientGone) return
  ctx.outcome.finishReason = 'abort'
  ctx.outcome.errorCode = 'superseded'
  ctx.timer.fail('superseded')
  for (const id of ids) deps.engine.abort(id)
  end()
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

/** The retry hint of a request displaced by higher-priority work: soon, and the edge may place it elsewhere. */
const PRIORITY_RETRY_AFTER_MS = 1000

/** The engine's own failure codes in ApiError terms; anything unknown is a fixed 500. */
function engineFailure(event: Extract<EngineEvent, { type: 'finish' }>): ApiError {
  const code = event.error?.code
  if (code === 'deadline_exceeded') return new ApiError('timeout', 'The request was dropped: its deadline passed before it could finish.')
  // Displaced from a full queue by a request of higher priority (engine.ts submit).
  if (code === 'overloaded') return new ApiError('overloaded', 'This node is at capacity and a request of higher priority took this one\'s place in the queue; please retry.', { retryAfterMs: PRIORITY_RETRY_AFTER_MS })
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
