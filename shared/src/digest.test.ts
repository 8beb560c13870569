import { createHash, createHmac } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { hashApiKey } from './api-key.ts'
import { webDigest, type Digest } from './digest.ts'
import { nodeDigest } from './node-digest.ts'
import { signRequest, verifySignature } from './signature.ts'

const encoder = new TextEncoder()
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex')
const fromHex = (text: string) => new Uint8Array(Buffer.from(text, 'hex'))
const digests: Record<string, Digest> = { web: webDigest, node: nodeDigest }

describe('webDigest and nodeDigest', () => {
  const inputs = ['', 'abc', '{"model":"tiny","messages":[{"role":"user","content":"héllo ✓"}]}', 'x'.repeat(100_000)].map((s) => encoder.encode(s))

  it('give the same sha256 (and the known vectors)', async () => {
    expect(await webDigest.sha256Hex(encoder.encode('abc'))).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
    expect(nodeDigest.sha256Hex(encoder.encode(''))).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')
    for (const data of inputs) expect(nodeDigest.sha256Hex(data)).toBe(await webDigest.sha256Hex(data))
  })

  it('give the same HMAC-SHA256 (RFC 4231 case 2) and verify each other’s MACs', async () => {
    const rfc = '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843'
    const msg = encoder.encode('what do ya want for nothing?')
    expect(await webDigest.hmacSha256Hex('Jefe', msg)).toBe(rfc)
    expect(await nodeDigest.hmacSha256Hex('Jefe', msg)).toBe(rfc)
    // A string message is its UTF-8 bytes, on both.
    for (const d of Object.values(digests)) expect(await d.hmacSha256Hex('Jefe', 'what do ya want for nothing?')).toBe(rfc)
    for (const secret of ['Jefe', 'zl-edge-secret-ünïcode', 'k'.repeat(200)]) {
      for (const data of inputs) {
        const web = fromHex(await webDigest.hmacSha256Hex(secret, data))
        const node = fromHex(await nodeDigest.hmacSha256Hex(secret, data))
        expect(hex(node)).toBe(hex(web))
        expect(await webDigest.hmacVerify(secret, data, node)).toBe(true)
        expect(await nodeDigest.hmacVerify(secret, data, web)).toBe(true)
      }
    }
  })

  it('refuse a wrong, short or empty MAC', async () => {
    const msg = encoder.encode('m')
    const mac = fromHex(await webDigest.hmacSha256Hex('s', msg))
    const flipped = Uint8Array.from(mac)
    flipped[31]! ^= 1
    for (const d of Object.values(digests)) {
      expect(await d.hmacVerify('s', msg, flipped)).toBe(false)
      expect(await d.hmacVerify('s', msg, mac.subarray(0, 16))).toBe(false)
      expect(await d.hmacVerify('s', msg, new Uint8Array(0))).toBe(false)
      expect(await d.hmacVerify('other', msg, mac)).toBe(false)
    }
  })

  it('hash API keys alike', async () => {
    const key = 'zl-' + 'A1b2'.repeat(8)
    expect(await hashApiKey(key, nodeDigest)).toBe(await hashApiKey(key))
    // A string is hashed as its UTF-8 bytes, by both.
    for (const d of Object.values(digests)) expect(await d.sha256Hex('héllo ✓')).toBe(await webDigest.sha256Hex(encoder.encode('héllo ✓')))
  })
})

describe('signatures across digests', () => {
  const now = 1_700_000_000_000
  const req = { secret: 'edge-secret', method: 'POST', path: '/v1/chat/completions', requestId: 'req-1', body: encoder.encode('{"model":"tiny","messages":[]}'), nowMs: now }

  for (const [signer, signWith] of Object.entries(digests)) {
    for (const [verifier, verifyWith] of Object.entries(digests)) {
      it(`signed with ${signer}, verified with ${verifier}`, async () => {
        const header = await signRequest(req, signWith)
        expect(header).toBe(await signRequest(req, verifyWith))
        // DESIGN.md §4's string, computed here apart from signature.ts: the wire format holds.
        const bodyHash = createHash('sha256').update(req.body).digest('hex')
        expect(header).toBe(`t=${now},v1=${createHmac('sha256', req.secret).update(`${now}\nPOST\n${req.path}\n${req.requestId}\n${bodyHash}`).digest('hex')}`)
        expect(await verifySignature({ ...req, header }, verifyWith)).toEqual({ ok: true })
        const mismatch = { ok: false, reason: 'mismatch' }
        expect(await verifySignature({ ...req, header, body: encoder.encode('{"model":"big","messages":[]}') }, verifyWith)).toEqual(mismatch)
        expect(await verifySignature({ ...req, header, secret: 'other' }, verifyWith)).toEqual(mismatch)
        const last = header.at(-1) === '0' ? '1' : '0'
        expect(await verifySignature({ ...req, header: header.slice(0, -1) + last }, verifyWith)).toEqual(mismatch)
      })
    }
  }
})
