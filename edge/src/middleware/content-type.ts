/**
 * Step 1b of a generate request, before auth: the body must be declared as JSON. Valid JSON sent
 * as text/plain, form-urlencoded, multipart, XML or with no Content-Type is refused 415 in the
 * dialect's shape, naming the header to send (FastAPI, and so vLLM, refuses it on parse too).
 *
 * Why before auth: a text/plain (or form) POST is a CORS "simple request", which a browser sends
 * cross-site without a preflight, with whatever credentials a page can make it carry. Refusing
 * it here means such a request never costs a key lookup, a rate-limit unit or a body read. It
 * needs no I/O and its answer is one fixed sentence, so a caller without a key learns nothing
 * from it but what the API reference says (the routes take JSON).
 *
 * Accepted: `application/json` and any `application/<x>+json` (RFC 6839), with parameters;
 * a `charset` parameter, when present, must be UTF-8 (RFC 8259 §8.1: JSON between systems is
 * UTF-8, and the body is decoded as such).
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import type { Step } from './pipeline.ts'

const JSON_MEDIA_TYPE = /^application\/(?:[a-z0-9!#$&^_.-]+\+)?json$/

export function requireJsonBody(): Step {
  return (c) => {
    if (!isJsonContentType(c.req.header('content-type'))) throw notJson()
  }
}

/** Whether a Content-Type header declares a JSON body (see the file comment for the rules). */
export function isJsonContentType(header: string | undefined): boolean {
  if (header === undefined) return false
  // What both SDKs and nearly every client send: no split, lower-casing or regex (~114 ns a call).
  if (header === 'application/json') return true
  const [type, ...params] = header.split(';')
  if (!JSON_MEDIA_TYPE.test(type!.trim().toLowerCase())) return false
  for (const param of params) {
    const eq = param.indexOf('=')
    if (eq < 0 || param.slice(0, eq).trim().toLowerCase() !== 'charset') continue
    const charset = param.slice(eq + 1).trim().replace(/^"(.*)"$/, '$1').toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') return false
  }
  return true
}

function notJson(): ApiError {
  // Fixed text: the header's value is not echoed (it is the client's, and may be anything).
  return new ApiError('unsupported_media_type', "Unsupported Content-Type: the request body must be JSON; send the header 'Content-Type: application/json'.")
}
