import { describe, expect, it } from 'vitest'
import { ApiError } from '../../../shared/src/api-error.ts'
import { getDialect, type DialectCodec } from '../../../shared/src/dialects/index.ts'
import { fourthDialectCodec } from '../../../shared/test/support/fourth-dialect.ts'
import { resolveMaxTokens } from './token-budget.ts'

/** The error resolveMaxTokens throws. */
function refusal(codec: DialectCodec, promptTokens: number, requested: number | undefined, contextLength: number): ApiError {
  try {
    resolveMaxTokens(codec, promptTokens, requested, contextLength)
  } catch (e) {
    if (e instanceof ApiError) return e
    throw e
  }
  throw new Error('resolveMaxTokens did not refuse')
}

describe('resolveMaxTokens', () => {
  const chat = getDialect('openai-chat')

  it('grants what fits, and the rest of the context when nothing was asked', () => {
    expect(resolveMaxTokens(chat, 10, 5, 64)).toBe(5)
    expect(resolveMaxTokens(chat, 10, undefined, 64)).toBe(54)
  })

  it("words a prompt that fills the context the way each dialect's users know", () => {
    expect(refusal(chat, 64, 5, 64)).toMatchObject({
      code: 'context_length_exceeded',
      param: 'messages',
      message: "This model's maximum context length is 64 tokens. However, your messages resulted in 64 tokens, which leaves no room to generate. Please reduce the length of the messages.",
    })
    expect(refusal(getDialect('openai-completions'), 64, 5, 64)).toMatchObject({ param: 'prompt', message: expect.stringContaining('your prompt resulted in 64 tokens') })
    expect(refusal(getDialect('anthropic-messages'), 64, 5, 64)).toMatchObject({ param: 'messages', message: 'prompt is too long: 64 tokens > 63 maximum' })
  })

  it('words a max_tokens past the context the same way', () => {
    expect(refusal(chat, 10, 60, 64)).toMatchObject({
      param: 'max_tokens',
      message: "This model's maximum context length is 64 tokens. However, you requested 70 tokens (10 in the messages, 60 in the completion). Please reduce the length of the messages or completion.",
    })
    expect(refusal(getDialect('anthropic-messages'), 10, 60, 64)).toMatchObject({
      param: 'max_tokens',
      message: 'input length and `max_tokens` exceed context limit: 10 + 60 > 64, decrease input length or `max_tokens` and try again',
    })
  })

  it("takes a registered fourth dialect's wording with no edit here", () => {
    expect(refusal(fourthDialectCodec, 64, 5, 64)).toMatchObject({ param: 'prompt', message: 'fourth: a 64-token prompt fills the 64-token context' })
    expect(refusal(fourthDialectCodec, 10, 60, 64)).toMatchObject({ param: 'max_tokens', message: 'fourth: 10 + 60 tokens exceed the 64-token context' })
  })
})
