/**
 * Step 4a: the request body as bytes, at most MAX_BODY_BYTES. A declared content-length over the
 * limit is refused without reading; a body that grows past it (chunked, or a lying length) is
 * refused as soon as it does, and the rest is never read.
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import { concatBytes } from '../bytes.ts'

export async function readBodyLimited(req: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = req.headers.get('content-length')
  if (declared !== null && /^\d+$/.test(declared)) {
    if (Number(declared) > maxBytes) throw tooLarge(maxBytes)
    // The server holds the body to its declared length, so reading it whole is bounded; on the
    // Node entry this also takes @hono/node-server's direct path (no web Request, no stream).
    return new Uint8Array(await req.arrayBuffer())
  }
  if (!req.body) return new Uint8Array(0)

  const reader = req.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > maxBytes) {
      await reader.cancel().catch(() => {})
      throw tooLarge(maxBytes)
    }
    chunks.push(value)
  }
  return chunks.length === 1 ? chunks[0]! : concatBytes(chunks, total)
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError('request_too_large', `The request body exceeds the limit of ${maxBytes} bytes.`)
}
