/**
 * The node's side of resumable streams (shared/src/resume-wire.ts): what the edge asked for in
 * its (signed) headers. Malformed values are refused rather than guessed: a wrong prefix would
 * silently corrupt a client's answer.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import { parseResumeHeader, RESUME_HEADERS } from '../../../shared/src/resume-wire.ts'
import type { ServerRequest } from './http-types.ts'
import { headerValue } from './request-context.ts'

export interface ResumeAsk {
  /** Start content frames with `id:` lines. */
  resumable: boolean
  /** Tokens the client already has: continue after them (flushed: and the finish flush's text). */
  resume?: { tokens: number[]; flushed: boolean }
  /** Seed to use when the body has none. */
  seed?: number
}

export function readResumeAsk(req: ServerRequest): ResumeAsk {
  const ask: ResumeAsk = { resumable: headerValue(req, RESUME_HEADERS.resumable) === '1' }
  const resume = headerValue(req, RESUME_HEADERS.resume)
  if (resume !== undefined) {
    const parsed = parseResumeHeader(resume)
    if (!parsed) throw new ApiError('invalid_request', `Malformed ${RESUME_HEADERS.resume} header.`)
    ask.resume = parsed
  }
  const seed = headerValue(req, RESUME_HEADERS.seed)
  if (seed !== undefined) {
    if (!/^\d{1,10}$/.test(seed) || Number(seed) >= 2 ** 32) throw new ApiError('invalid_request', `Malformed ${RESUME_HEADERS.seed} header.`)
    ask.seed = Number(seed)
  }
  return ask
}
