import { describe, expect, it } from 'vitest'
import { API_ERROR_CODES, ApiError, INTERNAL_ERROR_MESSAGE, toApiError } from './api-error.ts'
import { getDialect } from './dialects/index.ts'
import { errorStatus, renderError, renderStreamError } from './error-body.ts'
import { toAnthropicStopReason } from './dialects/anthropic-messages.ts'
import { toOpenAIFinishReason } from './dialects/openai-fields.ts'

const OPENAI = getDialect('openai-chat').errors
const ANTHROPIC = getDialect('anthropic-messages').errors

describe('toApiError', () => {
  it('passes ApiErrors through unchanged', () => {
    const e = new ApiError('rate_limited', 'slow down', { retryAfterMs: 10 })
    expect(toApiError(e)).toBe(e)
  })

  it('turns anything else into internal with a fixed message, keeping the original only as cause', () => {
    const original = new Error('ECONNREFUSED 10.0.0.7:9101 with token abc')
    for (const thrown of [original, 'a string', { message: 'object' }, undefined]) {
      const e = toApiError(thrown)
      expect(e.code).toBe('internal')
      expect(e.message).toBe(INTERNAL_ERROR_MESSAGE)
    }
    expect(toApiError(original).cause).toBe(original)
  })

  it('recognises an AbortSignal.timeout rejection as timeout', () => {
    expect(toApiError(new DOMException('signal timed out', 'TimeoutError')).code).toBe('timeout')
  })
})

describe('renderError', () => {
  it('renders an unknown error as a 500 with the fixed message and no trace of the original', () => {
    for (const dialect of ['openai-chat', 'anthropic-messages'] as const) {
      const r = renderError(getDialect(dialect).errors, new Error('secret=hunter2'))
      expect(r.status).toBe(500)
      expect(JSON.stringify(r.body)).not.toContain('hunter2')
      expect(JSON.stringify(r.body)).toContain(INTERNAL_ERROR_MESSAGE)
    }
  })

  it('shapes OpenAI bodies as { error: { message, type, param, code } }', () => {
    const r = renderError(getDialect('openai-completions').errors, new ApiError('invalid_request', "'n' must be 1.", { param: 'n' }))
    expect(r).toEqual({
      status: 400,
      body: { error: { message: "'n' must be 1.", type: 'invalid_request_error', param: 'n', code: 'invalid_request' } },
      headers: { 'content-type': 'application/json' },
    })
    expect(renderError(OPENAI, new ApiError('unauthorized', 'no')).body).toEqual({
      error: { message: 'no', type: 'authentication_error', param: null, code: 'unauthorized' },
    })
  })

  it('shapes Anthropic bodies as { type: "error", error: { type, message } }', () => {
    expect(renderError(ANTHROPIC, new ApiError('request_too_large', 'too big')).body).toEqual({
      type: 'error',
      error: { type: 'request_too_large', message: 'too big' },
    })
  })

  it('answers overload with 503 (OpenAI) and 529 (Anthropic), retry headers and x-should-retry', () => {
    const err = new ApiError('overloaded', 'busy', { retryAfterMs: 1200 })
    expect(renderError(OPENAI, err).status).toBe(503)
    const r = renderError(ANTHROPIC, err)
    expect(r.status).toBe(529)
    expect(r.headers).toEqual({ 'content-type': 'application/json', 'retry-after-ms': '1200', 'retry-after': '2', 'x-should-retry': 'true' })
  })

  it('marks rate limits retryable with retry-after in whole seconds, rounded up', () => {
    const r = renderError(OPENAI, new ApiError('rate_limited', 'slow', { retryAfterMs: 1 }))
    expect(r.status).toBe(429)
    expect(r.headers['retry-after']).toBe('1')
    expect(r.headers['x-should-retry']).toBe('true')
  })

  it('gives every code a status and an error type in both dialects', () => {
    for (const code of API_ERROR_CODES) {
      for (const shape of [OPENAI, ANTHROPIC]) {
        expect(errorStatus(shape, code)).toBeGreaterThanOrEqual(400)
        expect(shape.types[code]).toMatch(/^[a-z_]+$/)
      }
    }
  })
})

describe('renderStreamError', () => {
  it('writes one data line for OpenAI and an error event for Anthropic', () => {
    const err = new ApiError('timeout', 'late')
    expect(renderStreamError(OPENAI, err)).toBe(
      'data: {"error":{"message":"late","type":"server_error","param":null,"code":"timeout"}}\n\n',
    )
    expect(renderStreamError(ANTHROPIC, err)).toBe('event: error\ndata: {"type":"error","error":{"type":"timeout_error","message":"late"}}\n\n')
  })

  it('does not leak unknown errors either', () => {
    expect(renderStreamError(OPENAI, new Error('stack trace here'))).not.toContain('stack trace')
  })
})

describe('finish reasons', () => {
  it('maps the engine reasons to each dialect', () => {
    expect([toOpenAIFinishReason('stop'), toOpenAIFinishReason('stop_sequence'), toOpenAIFinishReason('length')]).toEqual(['stop', 'stop', 'length'])
    expect([toAnthropicStopReason('stop'), toAnthropicStopReason('stop_sequence'), toAnthropicStopReason('length')]).toEqual([
      'end_turn',
      'stop_sequence',
      'max_tokens',
    ])
  })
})
