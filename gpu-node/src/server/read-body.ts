/**
 * Reads a request body into memory with a byte limit. The signature covers the raw bytes, so
 * the body is kept as bytes; the limit is enforced on the declared length first (a refused
 * client costs no reading) and then on what actually arrives (chunked uploads, lying headers).
 */
import { ApiError } from '../../../shared/src/api-error.ts'
import type { ServerRequest } from './http-types.ts'

export class BodyTooLargeError extends ApiError {
  constructor(maxBytes: number) {
    super('request_too_large', `The request body exceeds the limit of ${maxBytes} bytes.`)
  }
}

/** Resolves with the body, or rejects with BodyTooLargeError (reading stops) or when the client goes away. */
export function readBody(req: ServerRequest, maxBytes: number): Promise<Uint8Array> {
  const declared = Number(req.headers['content-length'])
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new BodyTooLargeError(maxBytes))

  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const cleanup = () => {
      req.removeListener('data', onData)
      req.removeListener('end', onEnd)
      req.removeListener('error', onError)
      req.removeListener('close', onClose)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > maxBytes) {
        cleanup()
        req.pause()
        reject(new BodyTooLargeError(maxBytes))
        return
      }
      chunks.push(chunk)
    }
    const onEnd = () => {
      cleanup()
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size))
    }
    const onError = (e: Error) => {
      cleanup()
      reject(e)
    }
    // 'close' before 'end': the client hung up mid-upload.
    const onClose = () => {
      cleanup()
      reject(new ClientGoneError())
    }
    req.on('data', onData)
    req.on('end', onEnd)
    req.on('error', onError)
    req.on('close', onClose)
  })
}

/** The client closed the connection before the request was complete: nothing to answer. */
export class ClientGoneError extends Error {
  override readonly name = 'ClientGoneError'
}
