import { describe, expect, it } from 'vitest'
import { encodeTokens, resumeSignedExtra } from './resume-wire.ts'
import { signRequest, verifySignature } from './signature.ts'

const now = 1_700_000_000_000
const body = new TextEncoder().encode('{"model":"tiny","messages":[]}')
const req = { secret: 'edge-secret', method: 'POST', path: '/v1/chat/completions', requestId: 'req-1', body, nowMs: now }

describe('request signatures', () => {
  it('produces t=<ms>,v1=<64 hex>', async () => {
    expect(await signRequest(req)).toMatch(/^t=1700000000000,v1=[0-9a-f]{64}$/)
  })

  it('verifies what it signed, within the tolerance', async () => {
    const header = await signRequest(req)
    expect(await verifySignature({ ...req, header })).toEqual({ ok: true })
    expect(await verifySignature({ ...req, header, nowMs: now + 29_000 })).toEqual({ ok: true })
  })

  it('rejects a wrong secret, changed body, path, method or request id as mismatch', async () => {
    const header = await signRequest(req)
    const mismatch = { ok: false, reason: 'mismatch' }
    expect(await verifySignature({ ...req, header, secret: 'other' })).toEqual(mismatch)
    expect(await verifySignature({ ...req, header, body: new TextEncoder().encode('{"model":"big"}') })).toEqual(mismatch)
    expect(await verifySignature({ ...req, header, path: '/v1/messages' })).toEqual(mismatch)
    expect(await verifySignature({ ...req, header, method: 'PUT' })).toEqual(mismatch)
    expect(await verifySignature({ ...req, header, requestId: 'req-2' })).toEqual(mismatch)
  })

  it('signs resume headers when present (extra) and leaves an ordinary signature unchanged', async () => {
    const plain = await signRequest(req)
    expect(await signRequest({ ...req, extra: '' })).toBe(plain)
    const extra = resumeSignedExtra((n) => ({ 'x-zl-resume': encodeTokens([1, 300, 70000]), 'x-zl-seed': '7' })[n])
    const header = await signRequest({ ...req, extra })
    expect(header).not.toBe(plain)
    expect(await verifySignature({ ...req, extra, header })).toEqual({ ok: true })
    // A captured request replayed with another prefix (or none) fails.
    const other = resumeSignedExtra((n) => ({ 'x-zl-resume': encodeTokens([1, 300]), 'x-zl-seed': '7' })[n])
    expect(await verifySignature({ ...req, extra: other, header })).toEqual({ ok: false, reason: 'mismatch' })
    expect(await verifySignature({ ...req, header })).toEqual({ ok: false, reason: 'mismatch' })
  })

  it('rejects a signature older or newer than the tolerance as expired', async () => {
    const header = await signRequest(req)
    expect(await verifySignature({ ...req, header, nowMs: now + 31_000 })).toEqual({ ok: false, reason: 'expired' })
    expect(await verifySignature({ ...req, header, nowMs: now - 31_000 })).toEqual({ ok: false, reason: 'expired' })
    expect(await verifySignature({ ...req, header, nowMs: now + 5_000, toleranceMs: 1_000 })).toEqual({ ok: false, reason: 'expired' })
  })

  it('rejects a changed timestamp as mismatch (t is signed)', async () => {
    const header = (await signRequest(req)).replace('t=1700000000000', 't=1700000000001')
    expect(await verifySignature({ ...req, header })).toEqual({ ok: false, reason: 'mismatch' })
  })

  it('tells missing from malformed headers', async () => {
    expect(await verifySignature({ ...req, header: null })).toEqual({ ok: false, reason: 'missing' })
    expect(await verifySignature({ ...req, header: '' })).toEqual({ ok: false, reason: 'missing' })
    for (const header of ['garbage', 't=abc,v1=00', `t=${now}`, `v1=${'a'.repeat(64)}`, `t=${now},v1=${'g'.repeat(64)}`, `t=${now},v1=${'a'.repeat(64)},x=1`]) {
      expect(await verifySignature({ ...req, header })).toEqual({ ok: false, reason: 'malformed' })
    }
  })
})
