/**
 * The three dialects behind one interface, so routes and stream writers never branch on the
 * dialect: `getDialect(name)` or `dialectForPath(path)`, then parse / streamEncoder / jsonBody.
 */

import { renderError } from '../error-body.ts'
import type { Dialect } from '../generation.ts'
import { messagesJsonBody, messagesStreamEncoder, parseMessagesRequest } from './anthropic-messages.ts'
import type { DialectCodec } from './codec.ts'
import { chatJsonBody, chatStreamEncoder, parseChatCompletionRequest } from './openai-chat.ts'
import { completionJsonBody, completionStreamEncoder, parseCompletionRequest } from './openai-completions.ts'

export type { DialectCodec, ResponseMeta, StreamEncoder, StreamMeta } from './codec.ts'

const DIALECTS: Readonly<Record<Dialect, DialectCodec>> = {
  'openai-chat': {
    name: 'openai-chat',
    path: '/v1/chat/completions',
    parse: parseChatCompletionRequest,
    streamEncoder: chatStreamEncoder,
    jsonBody: chatJsonBody,
    renderError: (err) => renderError('openai-chat', err),
  },
  'openai-completions': {
    name: 'openai-completions',
    path: '/v1/completions',
    parse: parseCompletionRequest,
    streamEncoder: completionStreamEncoder,
    jsonBody: completionJsonBody,
    renderError: (err) => renderError('openai-completions', err),
  },
  'anthropic-messages': {
    name: 'anthropic-messages',
    path: '/v1/messages',
    parse: parseMessagesRequest,
    streamEncoder: messagesStreamEncoder,
    jsonBody: messagesJsonBody,
    renderError: (err) => renderError('anthropic-messages', err),
  },
}

export const DIALECT_NAMES = Object.keys(DIALECTS) as Dialect[]

export function getDialect(name: Dialect): DialectCodec {
  return DIALECTS[name]
}

/** The dialect served on a URL pathname (a trailing slash is tolerated); undefined for other paths. */
export function dialectForPath(path: string): DialectCodec | undefined {
  const clean = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path
  return Object.values(DIALECTS).find((d) => d.path === clean)
}

/**
 * The dialect whose error shape fits a path, for errors raised before routing (auth, rate limit,
 * unknown route): Anthropic's for /v1/messages, OpenAI's everywhere else.
 */
export function errorDialectForPath(path: string): Dialect {
  return dialectForPath(path)?.name ?? 'openai-chat'
}
