import { describe, expect, it } from 'vitest'
import { ApiError } from '../../../shared/src/api-error.ts'
import { DISCARD_LIMIT, discardBody, readBodyLimited } from './body-limit.ts'

const MAX = 1024

/** A body of `pieces` chunks of `size` bytes that counts what was pulled from it and whether it was cancelled. */
function counted(pieces: number, size = 256) {
  const seen = { pulled: 0, cancelled: false }
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (seen.pulled >= pieces * size) return controller.close()
      seen.pulled += size
      controller.enqueue(new Uint8Array(size))
    },
    cancel() {
      seen.cancelled = true
    },
  })
  return { stream, seen }
}

const request = (body: ReadableStream<Uint8Array> | Uint8Array, headers: Record<string, string> = {}) =>
  new Request('http://edge.test/v1/chat/completions', { method: 'POST', body, headers, duplex: 'half' } as RequestInit)

async function refusal(p: Promise<unknown>): Promise<ApiError> {
  const e = await p.then(() => undefined, (err: unknown) => err)
  expect(e).toBeInstanceOf(ApiError)
  return e as ApiError
}

describe('readBodyLimited', () => {
  it('returns a body within the limit whole', async () => {
    const { stream } = counted(4)
    expect((await readBodyLimited(request(stream), MAX)).byteLength).toBe(1024)
  })

  it('reads the rest of a chunked body over the limit to its end before refusing it with 413', async () => {
    const { stream, seen } = counted(40)
    expect((await refusal(readBodyLimited(request(stream), MAX))).code).toBe('request_too_large')
    expect(seen.pulled).toBe(40 * 256)
    expect(seen.cancelled).toBe(false)
  })

  it('reads a body whose declared length is over the limit to its end, then refuses it', async () => {
    const bytes = new Uint8Array(10 * MAX)
    const req = request(bytes, { 'content-length': String(bytes.byteLength) })
    expect((await refusal(readBodyLimited(req, MAX))).code).toBe('request_too_large')
    expect(req.bodyUsed).toBe(true)
  })

  it('refuses a declared length over the discard limit without reading any of it', async () => {
    const { stream, seen } = counted(4)
    const req = request(stream, { 'content-length': String(DISCARD_LIMIT.bytes + 1) })
    expect((await refusal(readBodyLimited(req, MAX))).code).toBe('request_too_large')
    expect(seen.pulled).toBeLessThanOrEqual(256)
    expect(req.bodyUsed).toBe(false)
  })
})

describe('discardBody', () => {
  it('stops reading and cancels the body once it passed the byte bound', async () => {
    const { stream, seen } = counted(1000)
    expect(await discardBody(stream.getReader(), 0, { bytes: 4096, ms: 10_000 })).toBe(false)
    expect(seen.cancelled).toBe(true)
    expect(seen.pulled).toBeLessThan(1000 * 256)
    expect(seen.pulled).toBeGreaterThan(4096)
  })

  it('counts the bytes already read towards the bound', async () => {
    const { stream, seen } = counted(1000)
    expect(await discardBody(stream.getReader(), 4000, { bytes: 4096, ms: 10_000 })).toBe(false)
    expect(seen.pulled).toBeLessThanOrEqual(2 * 256)
  })

  it('stops at the time bound when the client stops sending', async () => {
    let cancelled = false
    const stalled = new ReadableStream<Uint8Array>({ pull: () => new Promise(() => {}), cancel: () => void (cancelled = true) })
    const t0 = Date.now()
    expect(await discardBody(stalled.getReader(), 0, { bytes: 4096, ms: 50 })).toBe(false)
    expect(Date.now() - t0).toBeLessThan(2000)
    expect(cancelled).toBe(true)
  })

  it('answers true for a body that ends within the bounds, and never throws for one that errors', async () => {
    expect(await discardBody(counted(3).stream.getReader(), 0)).toBe(true)
    const broken = new ReadableStream<Uint8Array>({ pull: (c) => c.error(new Error('client gone')) })
    expect(await discardBody(broken.getReader(), 0)).toBe(false)
  })
})
