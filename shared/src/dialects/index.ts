/**
 * The dialects served, in one table: the edge's and the node's generate routes, and the `Dialect`
 * name type, are read off it. Adding a dialect is its codec file plus one entry here; nothing
 * else branches on a dialect (routes, errors, rate-limit headers and context-length messages all
 * ask the codec).
 */

import { anthropicMessagesCodec } from './anthropic-messages.ts'
import type { DialectCodec } from './codec.ts'
import { dialectTable } from './dialect-table.ts'
import { openAIChatCodec } from './openai-chat.ts'
import { openAICompletionsCodec } from './openai-completions.ts'
import { openAIResponsesCodec } from './openai-responses.ts'

export type { ContextLengthErrors, DialectCodec, LimitHeaderNames, LimitHeaderStyle, LimitKind, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'
export { dialectTable, type DialectTable } from './dialect-table.ts'

/** OpenAI chat first: it answers errors on paths no dialect serves (auth on /v1/models, unknown routes). */
export const DIALECTS = dialectTable([openAIChatCodec, openAICompletionsCodec, anthropicMessagesCodec, openAIResponsesCodec])

/** A served dialect's name: one per codec in the table. */
export type Dialect = (typeof DIALECTS.codecs)[number]['name']

// Shorthands for the served table.

export function getDialect(name: Dialect): DialectCodec<Dialect> {
  return DIALECTS.get(name)
}

/** The dialect served on a URL pathname (a trailing slash is tolerated); undefined for other paths. */
export function dialectForPath(path: string): DialectCodec<Dialect> | undefined {
  return DIALECTS.forPath(path)
}

/**
 * The dialect whose error shape fits a path, for errors raised before routing (auth, rate limit,
 * unknown route): Anthropic's for /v1/messages, OpenAI's everywhere else.
 */
export function errorCodecForPath(path: string): DialectCodec<Dialect> {
  return DIALECTS.errorCodecForPath(path)
}
