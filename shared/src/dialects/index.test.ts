import { textChoice } from '../generation.ts'
import { describe, expect, it } from 'vitest'
import { renderError } from '../error-body.ts'
import { DIALECTS_WITH_FOURTH } from '../../test/support/fourth-dialect.ts'
import { ApiError } from '../api-error.ts'
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
    expect(getDialect('openai-chat').jsonBody(meta, [textChoice('', 'stop')], usage)).toMatchObject({ id: 'chatcmpl-abc' })
    expect(getDialect('openai-completions').jsonBody(meta, [textChoice('', 'stop')], usage)).toMatchObject({ id: 'cmpl-abc' })
    expect(getDialect('anthropic-messages').jsonBody(meta, [textChoice('', 'stop')], usage)).toMatchObject({ id: 'msg_abc' })
  })

  it('renders errors in each dialect through the codec', () => {
    for (const codec of DIALECTS.codecs) expect(renderError(codec.errors, new Error('x')).status).toBe(500)
  })

  it("names the frames that end each dialect's stream as its encoders write them, and no other frame", () => {
    const frames = (text: string) => text.split('\n\n').filter((f) => f !== '').map((f) => `${f}\n\n`)
    const ends = (codec: (typeof DIALECTS_WITH_FOURTH.codecs)[number], frame: string) => codec.streamEnds.some((p) => frame.startsWith(p))
    for (const codec of DIALECTS_WITH_FOURTH.codecs) {
      const enc = codec.streamEncoder({ requestId: 'r', model: 'm', created: 1, promptTokens: 3, includeUsage: true })
      const body = [enc.start(), enc.text('hello'), enc.text(' world')].flatMap(frames)
      const finish = frames(enc.finish('length', { promptTokens: 3, completionTokens: 2 }))
      expect(body.some((f) => ends(codec, f)), codec.name).toBe(false)
      expect(finish.slice(0, -1).some((f) => ends(codec, f)), codec.name).toBe(false)
      expect(ends(codec, finish.at(-1)!), `${codec.name} last frame`).toBe(true)
      expect(ends(codec, enc.error(new ApiError('upstream_unavailable', 'gone'))), `${codec.name} error frame`).toBe(true)
    }
  })
})
