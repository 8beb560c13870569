/**
 * Step 4a: body (bounded) → JSON → the dialect's shared zod parser → a GenerateRequest, with
 * every failure in the dialect's error shape (the shared parsers throw ApiError naming the
 * field, never a ZodError dump). It runs while the requests/min decision is in flight
 * (requests-limit.ts), so a bad body is refused without waiting on the limiter's store.
 * Then, once the request is admitted (`checkModel`), the model: outside the key's allowlist, or
 * served by no known node → 404 (OpenAI's model_not_found, Anthropic's not_found_error).
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import { clipText } from '../../../shared/src/clip-text.ts'
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import { parseJsonBody } from '../../../shared/src/json-body.ts'
import { parsePriorityAsk, PRIORITY_HEADER } from '../../../shared/src/priority.ts'
import { parseSupersedeKey, SUPERSEDE_HEADER } from '../../../shared/src/supersede.ts'
import type { RateLimiter } from '../limits/rate-limiter.ts'
import { isServing, servesModel, type RoutableNode } from '../routing/pick-node.ts'
import type { NodeRegistry } from '../routing/node-registry.ts'
import { mayUseModel } from './auth.ts'
import { readBodyLimited } from './body-limit.ts'
import type { Step } from './pipeline.ts'
import { refuseIfKnownRefused } from './requests-limit.ts'

export function parseGenerate(codec: DialectCodec, maxBodyBytes: number, limiter: RateLimiter, now: () => number): Step {
  return async (c) => {
    const body = await readBodyLimited(c.req.raw, maxBodyBytes)
    await refuseIfKnownRefused(c, limiter, now)
    const gen = codec.parse(parseJsonBody(body))
    const supersede = parseSupersedeKey(c.req.header(SUPERSEDE_HEADER))
    const priorityAsk = parsePriorityAsk(c.req.header(PRIORITY_HEADER))
    c.set('generate', { codec, gen, body, ...(supersede === undefined ? {} : { supersede }), ...(priorityAsk === undefined ? {} : { priorityAsk }) })
  }
}

export function checkModel(registry: NodeRegistry, now: () => number): Step {
  return async (c) => {
    const { gen } = c.get('generate')
    const table = await registry.table(c.get('waitUntil'))
    if (!mayUseModel(c.get('principal'), gen.model) || !isKnownModel(table.nodes, gen.model, now())) {
      throw modelNotFound(gen.model)
    }
  }
}

/**
 * A model is known when a node that is not draining and not stale lists it (a node marked down
 * for a few seconds still counts: "unreachable" is 502, not 404), or when a static node lists
 * no models (it may serve anything).
 */
export function isKnownModel(nodes: readonly RoutableNode[], model: string, nowMs: number): boolean {
  return nodes.some((n) => isServing(n, nowMs) && servesModel(n, model))
}

/** The union of models served by usable nodes (for /v1/models). */
export function knownModels(nodes: readonly RoutableNode[], nowMs: number): string[] {
  const models = new Set<string>()
  for (const n of nodes) if (isServing(n, nowMs)) for (const m of n.models ?? []) models.add(m)
  return [...models].sort()
}

function modelNotFound(model: string): ApiError {
  return new ApiError('model_not_found', `The model '${clipText(model)}' does not exist or you do not have access to it.`, { param: 'model' })
}
