import { describe, expect, it } from 'vitest'
import { ApiError } from '../api-error.ts'
import { completionStreamEncoder, DEFAULT_COMPLETION_MAX_TOKENS, parseCompletionRequest } from './openai-completions.ts'
import { apiErrorOf } from '../../test/support/api-error-of.ts'

const base = { model: 'tiny', prompt: 'Once upon a time' }

const rejection = (body: unknown): ApiError => apiErrorOf(() => parseCompletionRequest(body))

describe('parseCompletionRequest', () => {
  it('parses a text prompt with OpenAI defaults (max_tokens 16)', () => {
    const req = parseCompletionRequest(base)
    expect(req).toMatchObject({
      dialect: 'openai-completions',
      model: 'tiny',
      input: { kind: 'text', prompt: 'Once upon a time' },
      maxTokens: DEFAULT_COMPLETION_MAX_TOKENS,
      stop: [],
      stream: false,
      includeUsage: false,
    })
    expect(req.maxTokens).toBe(16)
    expect(req.echo).toBeUndefined()
  })

  it('accepts a one-element prompt array, echo, ignore_eos and best_of 1', () => {
    const req = parseCompletionRequest({ model: 'tiny', prompt: ['hi'], echo: true, ignore_eos: true, best_of: 1, max_tokens: 100, logprobs: null })
    expect(req.input).toEqual({ kind: 'text', prompt: 'hi' })
    expect(req.echo).toBe(true)
    expect(req.ignoreEos).toBe(true)
    expect(req.maxTokens).toBe(100)
  })

  it('reads prompt_cache_key as the context id', () => {
    expect(parseCompletionRequest({ ...base, prompt_cache_key: 'doc-7' }).contextId).toBe('doc-7')
    expect('contextId' in parseCompletionRequest(base)).toBe(false)
  })

  it('reads streaming with usage', () => {
    expect(parseCompletionRequest({ ...base, stream: true, stream_options: { include_usage: true } })).toMatchObject({ stream: true, includeUsage: true })
  })

  it('rejects several prompts, token prompts and empty prompts clearly', () => {
    expect(rejection({ model: 'tiny', prompt: ['a', 'b'] }).message).toContain('send one request per prompt')
    expect(rejection({ model: 'tiny', prompt: [1, 2, 3] }).message).toContain('token-id prompts are not supported')
    expect(rejection({ model: 'tiny', prompt: [[1, 2]] }).param).toBe('prompt')
    expect(rejection({ model: 'tiny', prompt: '' }).message).toBe("'prompt' must not be empty.")
    expect(rejection({ model: 'tiny' }).message).toBe("'prompt' is required.")
  })

  it('takes n with best_of = n, logprobs from 0 to 5, and suffix (not with echo)', () => {
    expect(parseCompletionRequest({ ...base, n: 3, best_of: 3 }).n).toBe(3)
    expect(rejection({ ...base, n: 3, best_of: 4 }).param).toBe('best_of')
    expect(rejection({ ...base, best_of: 2 }).message).toContain("'best_of' must equal 'n' (1)")
    expect(parseCompletionRequest({ ...base, logprobs: 5 }).logprobs).toEqual({ top: 5 })
    expect(parseCompletionRequest({ ...base, logprobs: 0 }).logprobs).toEqual({ top: 0 })
    expect(rejection({ ...base, logprobs: 6 }).message).toBe("'logprobs' must be at most 5.")
    expect(rejection({ ...base, logprobs: 1, echo: true }).param).toBe('logprobs')
    expect(parseCompletionRequest({ ...base, suffix: 'end' }).input).toEqual({ kind: 'text', prompt: base.prompt, suffix: 'end' })
    expect(parseCompletionRequest({ ...base, suffix: '' }).input).toEqual({ kind: 'text', prompt: base.prompt })
    expect(rejection({ ...base, suffix: 'end', echo: true }).param).toBe('suffix')
  })

  it('rejects unknown fields by name', () => {
    expect(rejection({ ...base, frobnicate: true }).param).toBe('frobnicate')
  })
})

describe('completionStreamEncoder', () => {
  it('sends nothing before the first token and text_completion chunks after', () => {
    const enc = completionStreamEncoder({ requestId: 'r1', model: 'tiny', created: 1, promptTokens: 2 })
    expect(enc.start()).toBe('')
    const chunk = JSON.parse(enc.text('Hi').slice('data: '.length))
    expect(chunk).toEqual({ id: 'cmpl-r1', object: 'text_completion', created: 1, model: 'tiny', choices: [{ text: 'Hi', index: 0, logprobs: null, finish_reason: null }] })
    expect(enc.finish('length', { promptTokens: 2, completionTokens: 1 }).endsWith('data: [DONE]\n\n')).toBe(true)
  })
})
