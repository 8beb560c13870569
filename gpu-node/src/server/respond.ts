/**
 * Whole (non-streaming) responses: JSON bodies and dialect-shaped errors. Every error a client
 * sees goes through `renderError`, so unknown failures become the fixed 500 message.
 */
import type { DialectCodec } from '../../../shared/src/dialects/index.ts'
import { renderError } from '../../../shared/src/error-body.ts'
import { end, writeHead, type OutgoingHttpHeaders, type ServerRequest, type ServerResponse } from './http-types.ts'

export function sendJson(req: ServerRequest, res: ServerResponse, status: number, body: unknown, headers: OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body)
  writeHead(req, res, status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  end(res, text)
}

export function sendText(req: ServerRequest, res: ServerResponse, status: number, text: string, contentType: string, headers: OutgoingHttpHeaders = {}): void {
  writeHead(req, res, status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text), ...headers })
  end(res, text)
}

/** Renders `err` in the codec's error shape; returns the status sent (for logs). */
export function sendError(req: ServerRequest, res: ServerResponse, codec: DialectCodec, err: unknown, headers: OutgoingHttpHeaders = {}): number {
  const rendered = renderError(codec.errors, err)
  sendJson(req, res, rendered.status, rendered.body, { ...rendered.headers, ...headers })
  return rendered.status
}
