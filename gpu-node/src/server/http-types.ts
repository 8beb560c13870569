/**
 * The slice of Node's HTTP/1.1 and HTTP/2 compat APIs the routes use, so one handler serves
 * `http.IncomingMessage`/`ServerResponse` and `http2.Http2ServerRequest`/`Http2ServerResponse`.
 */
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse as H1Response } from 'node:http'
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2'

export type ServerRequest = IncomingMessage | Http2ServerRequest
export type ServerResponse = H1Response | Http2ServerResponse
export type RequestHandler = (req: ServerRequest, res: ServerResponse) => void
export type { IncomingHttpHeaders, OutgoingHttpHeaders }

/** Connection-specific headers HTTP/2 forbids (RFC 9113 §8.2.2); Node throws if one is set. */
const H2_FORBIDDEN = ['connection', 'transfer-encoding', 'keep-alive', 'proxy-connection', 'upgrade']

export function isHttp2(req: ServerRequest): boolean {
  return req.httpVersionMajor >= 2
}

/** writeHead for both protocols, dropping headers HTTP/2 forbids. */
export function writeHead(req: ServerRequest, res: ServerResponse, status: number, headers: OutgoingHttpHeaders): void {
  if (isHttp2(req)) {
    for (const name of H2_FORBIDDEN) {
      delete headers[name]
      res.removeHeader(name)
    }
  }
  res.writeHead(status, headers)
}

/** Writes a chunk; returns false when the peer is slow (the caller may keep going: frames are small). */
export function write(res: ServerResponse, chunk: string): boolean {
  // The two write() overload sets are not callable as a union; both accept a string chunk.
  return (res as H1Response).write(chunk)
}

export function end(res: ServerResponse, chunk?: string): void {
  if (chunk === undefined) res.end()
  else res.end(chunk)
}
