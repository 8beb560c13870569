/**
 * The affinity key (edge/README.md "Cache-affine routing"): which requests are likely to share a
 * cached prefix on a GPU node, derived from the validated request without tokenizing.
 *
 * - A name the client gave the conversation wins: OpenAI's `prompt_cache_key` (the dialect parser
 *   puts it in GenerateRequest.contextId), else the `x-zl-context-id` header (any dialect).
 * - A turn of a stored conversation (Responses `previous_response_id`) is keyed by the answer it
 *   continues; where that answer was made is remembered under the same key (followUpKeyOf).
 * - Otherwise the conversation's stable prefix, which every later turn repeats unchanged: for chat
 *   (OpenAI chat, and Anthropic, whose `system` the parser turns into a leading system message)
 *   the messages up to and including the first user message — the system prompt(s) and the
 *   opening question (a message over 2 × MESSAGE_END_UNITS by its length, head and tail); for a
 *   text prompt its first TEXT_PREFIX_CHARS characters.
 * Always with the tenant and the model: the node's prefix cache is per model and salted per
 * tenant, so two tenants' identical prompts share nothing there and need not meet.
 *
 * The parsed request is dialect-neutral (shared/src/generation.ts), so this never asks which
 * dialect it came from. The hash is key-hash.ts (64-bit, fast and synchronous on both runtimes;
 * not a security boundary). Only the hash leaves this file — the Redis key `zl:aff:<hash>` —
 * never the text it was computed from, and it is never logged.
 */
import type { GenerateRequest } from '../../../shared/src/generation.ts'
import { KeyHash } from './key-hash.ts'
import type { AffinityKey } from '../context.ts'

export const CONTEXT_ID_HEADER = 'x-zl-context-id'

/**
 * How much of a text prompt names its prefix, in characters (UTF-16 code units). A completions
 * "conversation" resends a growing prompt, so only a fixed-length head stays the same across
 * turns; ~256 tokens is enough to tell documents and conversations apart. A prompt shorter than
 * this is its own key (and has little prefill to save).
 */
export const TEXT_PREFIX_CHARS = 1024

/**
 * How much of each chat message is hashed at each end, in code units. A message longer than
 * twice this is keyed by its length, head and tail (KeyHash.sampledField), so the key's cost stops
 * growing with the body: over a 100 kB message it was a fifth of the edge's CPU per request
 * (docs/PERFORMANCE.md). Two openings that differ only in their middle then share a key, which
 * only places them together, within the load bound; every shorter message is hashed whole.
 */
export const MESSAGE_END_UNITS = 2048

/** Longest context id taken into the key (a longer one is cut: the head still names it). */
const MAX_CONTEXT_ID_CHARS = 512

/** Changes whenever the derivation does, so keys made by an older edge never alias new ones. */
const KEY_VERSION = 'zl-aff-2'

export function affinityKeyOf(gen: GenerateRequest, tenant: string, contextIdHeader?: string | null): AffinityKey {
  const h = new KeyHash().field(KEY_VERSION).field(tenant).field(gen.model)
  const contextId = gen.contextId ?? cleanHeader(contextIdHeader)
  if (contextId !== undefined) {
    h.field('id').field(contextId.slice(0, MAX_CONTEXT_ID_CHARS))
    return { hash: h.hex(), point: h.point(), source: 'context-id' }
  }
  if (gen.stored?.previousId !== undefined) return storedKey(h, gen.stored.previousId)
  if (gen.input.kind === 'chat') {
    h.field('chat')
    for (const m of gen.input.messages) {
      h.field(m.role).sampledField(m.content, MESSAGE_END_UNITS)
      if (m.role === 'user') break
    }
  } else {
    // Last field: no length prefix, so a prompt that grows past the head keeps the same key.
    h.field('text').text(gen.input.prompt, TEXT_PREFIX_CHARS)
  }
  return { hash: h.hex(), point: h.point(), source: 'prefix' }
}

/**
 * The key a continuation of this request's stored answer (`storedId`) will have, when it will be
 * keyed by that id: the edge remembers where the answer was made under it, so the next turn goes
 * where its prefix is cached. Undefined when the request named its conversation otherwise (the
 * next turn will name it too) or keeps nothing.
 */
export function followUpKeyOf(gen: GenerateRequest, tenant: string, contextIdHeader: string | null | undefined, storedId: string): AffinityKey | undefined {
  if (!gen.stored?.store || gen.contextId !== undefined || cleanHeader(contextIdHeader) !== undefined) return undefined
  return storedKey(new KeyHash().field(KEY_VERSION).field(tenant).field(gen.model), storedId)
}

/** A stored conversation's turn is keyed by the stored answer it continues. */
function storedKey(h: KeyHash, storedId: string): AffinityKey {
  h.field('stored').field(storedId.slice(0, MAX_CONTEXT_ID_CHARS))
  return { hash: h.hex(), point: h.point(), source: 'context-id' }
}

function cleanHeader(value: string | null | undefined): string | undefined {
  const v = value?.trim()
  return v ? v : undefined
}
