import { describe, expect, it } from 'vitest'
import { ApiError } from '../api-error.ts'
import { renderError, renderStreamError } from '../error-body.ts'
import { DIALECTS_WITH_FOURTH, fourthDialectCodec } from '../../test/support/fourth-dialect.ts'
import { DIALECTS } from './index.ts'
import { dialectTable } from './dialect-table.ts'

describe('dialectTable', () => {
  it('serves a registered test dialect beside the served ones, by name and by route', () => {
    expect(DIALECTS_WITH_FOURTH.codecs.map((c) => c.path)).toEqual(['/v1/chat/completions', '/v1/completions', '/v1/messages', '/v1/responses', '/v1/fourth'])
    expect(DIALECTS_WITH_FOURTH.get('fourth')).toBe(fourthDialectCodec)
    expect(DIALECTS_WITH_FOURTH.forPath('/v1/fourth/')).toBe(fourthDialectCodec)
    expect(DIALECTS_WITH_FOURTH.errorCodecForPath('/v1/fourth')).toBe(fourthDialectCodec)
    expect(DIALECTS_WITH_FOURTH.errorCodecForPath('/v1/models').name).toBe('openai-chat')
    expect(DIALECTS.forPath('/v1/fourth')).toBeUndefined()
  })

  it("renders the fourth dialect's errors with the generic headers", () => {
    const r = renderError(fourthDialectCodec.errors, new ApiError('overloaded', 'busy', { retryAfterMs: 1200 }))
    expect(r).toEqual({
      // Its own status where it overrides the common one (overload), its own error.type.
      status: 599,
      body: { failure: { kind: 'fourth_overloaded', detail: 'busy' } },
      headers: { 'content-type': 'application/json', 'retry-after-ms': '1200', 'retry-after': '2', 'x-should-retry': 'true' },
    })
    expect(renderStreamError(fourthDialectCodec.errors, new Error('secret'))).toBe(
      'event: failure\ndata: {"failure":{"kind":"fourth_internal","detail":"The server had an error while processing your request."}}\n\n',
    )
  })

  it('refuses an empty table, and two dialects on one name or route', () => {
    expect(() => dialectTable([])).toThrow(/at least one/)
    expect(() => dialectTable([...DIALECTS.codecs, { ...fourthDialectCodec, name: 'openai-chat' }])).toThrow(/named 'openai-chat'/)
    expect(() => dialectTable([...DIALECTS.codecs, { ...fourthDialectCodec, path: '/v1/messages' }])).toThrow(/served on '\/v1\/messages'/)
  })
})
