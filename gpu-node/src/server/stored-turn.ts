/**
 * A turn of a stored conversation on the node (shared/src/dialects/responses-store.ts): the
 * request read as the continuation of the stored response it names, and its answer kept before
 * the client hears the end, so a client that continues at once finds it. Only a tenant the edge
 * vouches for (a verified signature) has a store: a direct, unsigned request is answered with
 * `store: false` and cannot continue one.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import { clipText } from '../../../shared/src/clip-text.ts'
import type { DialectCodec, ResponseMeta } from '../../../shared/src/dialects/index.ts'
import type { ResponsesStore } from '../../../shared/src/dialects/responses-store.ts'
import type { ChoiceOutput, GenerateRequest, Usage } from '../../../shared/src/generation.ts'

/** Keeps a finished answer; false when the store failed (the answer then says `store: false`). */
export type KeepAnswer = (meta: ResponseMeta, choices: ChoiceOutput[], usage: Usage) => Promise<boolean>

export interface StoredTurnRead {
  gen: GenerateRequest
  keep?: KeepAnswer
}

export interface StoreAccess {
  store?: ResponsesStore
  /** The verified tenant, if any. */
  tenant?: string
  /** A failed write, for the log (never the record). */
  onKeepFailed?: (e: unknown) => void
}

export async function readStoredTurn(codec: DialectCodec, json: unknown, parsed: GenerateRequest, access: StoreAccess): Promise<StoredTurnRead> {
  const facet = codec.stored
  const turn = parsed.stored
  if (!facet || !turn) return { gen: parsed }
  const { tenant } = access
  const store = tenant !== undefined ? access.store : undefined
  let gen = parsed
  const previous = turn.previousId === undefined ? undefined : await loadPrevious(store, tenant, turn.previousId)
  if (previous) gen = facet.parseContinuation(json, previous)
  if (!turn.store) return { gen }
  if (!store || tenant === undefined) {
    unkept(gen)
    return { gen }
  }
  const keep: KeepAnswer = async (meta, choices, usage) => {
    try {
      await store.save(tenant, facet.id(meta.requestId), facet.record(gen, meta, choices, usage, previous))
      return true
    } catch (e) {
      access.onKeepFailed?.(e)
      unkept(gen)
      return false
    }
  }
  return { gen, keep }
}

async function loadPrevious(store: ResponsesStore | undefined, tenant: string | undefined, id: string) {
  if (!store || tenant === undefined) {
    throw new ApiError('invalid_request', "'previous_response_id' needs the response store, which only requests through the edge have on this node.", { param: 'previous_response_id' })
  }
  let found
  try {
    found = await store.load(tenant, id)
  } catch (e) {
    throw new ApiError('upstream_unavailable', 'The response store could not be reached; please retry.', { retryAfterMs: 1000, cause: e })
  }
  if (!found) throw new ApiError('not_found', `Previous response with id '${clipText(id)}' not found.`, { param: 'previous_response_id' })
  return found
}

/** The answer is not kept: it says so (`store: false`). The echo object is the one the answer's meta carries. */
function unkept(gen: GenerateRequest): void {
  gen.stored!.store = false
  if (gen.responseEcho) gen.responseEcho.store = false
}
