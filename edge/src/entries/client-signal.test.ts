/**
 * ClientCloseSignal against a real node:http server: it aborts when the client's connection
 * closes before the response finished (once, each listener once), not after a response that
 * finished, and at once when the response was already closed when it was made.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { ClientCloseSignal } from './client-signal.ts'

let server: http.Server | undefined
afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())))

/** A server whose handler hands each request's pair to `onRequest`; a client that sends one request. */
async function serve(onRequest: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<http.ClientRequest> {
  server = http.createServer(onRequest)
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve))
  const req = http.request({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, path: '/', method: 'POST', agent: false })
  req.on('error', () => {})
  req.end('{}')
  return req
}

describe('ClientCloseSignal', () => {
  it('aborts, and calls each listener once, when the client leaves before the response finished', async () => {
    let signal: ClientCloseSignal | undefined
    const calls: string[] = []
    const client = await serve((req, res) => {
      signal = new ClientCloseSignal(res, req)
      signal.addEventListener('abort', () => calls.push('a'))
      const removed = () => calls.push('removed')
      signal.addEventListener('abort', removed)
      signal.removeEventListener('abort', removed)
      signal.addEventListener('abort', () => calls.push('b'))
      res.writeHead(200)
      res.write('partial')
    })
    client.on('response', () => client.destroy())
    await waitFor(() => signal?.aborted === true)
    expect(calls).toEqual(['a', 'b'])
    expect(signal!.reason).toBeInstanceOf(Error)
  })

  it('does not abort after a response that finished', async () => {
    let signal: ClientCloseSignal | undefined
    let closed = false
    const client = await serve((req, res) => {
      signal = new ClientCloseSignal(res, req)
      res.on('close', () => (closed = true))
      res.end('whole')
    })
    client.on('response', (r) => r.resume())
    await waitFor(() => closed)
    expect(signal!.aborted).toBe(false)
  })

  it('is aborted from the start when the response had already closed unfinished', async () => {
    let signal: ClientCloseSignal | undefined
    const client = await serve((req, res) => {
      res.writeHead(200)
      res.write('partial')
      res.on('close', () => (signal = new ClientCloseSignal(res, req)))
    })
    client.on('response', () => client.destroy())
    await waitFor(() => signal !== undefined)
    expect(signal!.aborted).toBe(true)
  })
})

async function waitFor(ok: () => boolean, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs
  while (!ok()) {
    if (Date.now() > until) throw new Error('condition not met in time')
    await new Promise((resolve) => setImmediate(resolve))
  }
}
