import { describe, expect, it } from 'vitest'
import { renderError } from '../error-body.ts'
import { DIALECTS, dialectForPath, errorCodecForPath, getDialect } from './index.ts'

describe('dialect registry', () => {
  it('serves each dialect on its route', () => {
    expect(dialectForPath('/v1/chat/completions')?.name).toBe('openai-chat')
    expect(dialectForPath('/v1/completions')?.name).toBe('openai-completions')
    expect(dialectForPath('/v1/messages/')?.name).toBe('anthropic-messages')
    expect(dialectForPath('/v1/models')).toBeUndefined()
  })

  it('answers pre-routing errors in Anthropic shape on /v1/messages only', () => {
    expect(errorCodecForPath('/v1/messages').name).toBe('anthropic-messages')
    expect(errorCodecForPath('/nope').name).toBe('openai-chat')
  })

  it('derives response ids from the request id', () => {
    const meta = { requestId: 'abc', model: 'm', created: 1 }
    const usage = { promptTokens: 1, completionTokens: 1 }
    expect(getDialect('openai-chat').jsonBody(meta, '', 'stop', usage)).toMatchObject({ id: 'chatcmpl-abc' })
    expect(getDialect('openai-completions').jsonBody(meta, '', 'stop', usage)).toMatchObject({ id: 'cmpl-abc' })
    expect(getDialect('anthropic-messages').jsonBody(meta, '', 'stop', usage)).toMatchObject({ id: 'msg_abc' })
  })

  it('renders errors in each dialect through the codec', () => {
    for (const codec of DIALECTS.codecs) expect(renderError(codec.errors, new Error('x')).status).toBe(500)
  })
})
