import http from 'node:http'
import https from 'node:https'
import type { TLSSocket } from 'node:tls'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeSelfSignedCert, type TestCert } from '../../../test/support/self-signed-cert.ts'
import { h2Connect, h2Request, json, startTestNode, type TestNode } from '../../test/support/test-node.ts'
import { H2_CONNECTION_WINDOW_BYTES, h2Windows } from './http.ts'

const chatBody = JSON.stringify({ model: 'zl-test-model', messages: [{ role: 'user', content: 'hi' }] })

describe('plaintext listener', () => {
  let node: TestNode
  beforeAll(async () => {
    node = await startTestNode({ allowUnsigned: true })
  })
  afterAll(() => node.close())

  it('serves HTTP/1.1 and h2c prior knowledge on the same port', async () => {
    const h1 = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', body: chatBody })
    expect(h1.status).toBe(200)
    expect((await json(h1)).choices[0].message.content).toBe('Hello!')

    const session = await h2Connect(node.url)
    try {
      const h2 = await h2Request(session, 'POST', '/v1/chat/completions', chatBody)
      expect(h2.status).toBe(200)
      expect(JSON.parse(h2.body).choices[0].message.content).toBe('Hello!')
      expect(h2.headers['x-request-id']).toBeTruthy()
      expect(h2.headers['transfer-encoding']).toBeUndefined()
      // Several streams on one session: the edge multiplexes requests over one connection.
      const many = await Promise.all([1, 2, 3].map(() => h2Request(session, 'GET', '/healthz')))
      expect(many.map((r) => r.status)).toEqual([200, 200, 200])
    } finally {
      session.close()
    }
  })

  it('advertises HTTP/2 windows that let the largest accepted body arrive in one flight', async () => {
    // With the protocol's 64 KiB default an edge one region away sends 64 KiB per round trip.
    const session = await h2Connect(node.url)
    try {
      const big = JSON.stringify({ model: 'zl-test-model', messages: [{ role: 'user', content: 'hi' }] }).replace(/}$/, ' '.repeat(200_000) + '}')
      const res = await h2Request(session, 'POST', '/v1/chat/completions', big)
      expect(res.status).toBe(200)
      expect(session.remoteSettings.initialWindowSize).toBe(h2Windows(1024 * 1024).stream)
      expect(h2Windows(1024 * 1024).stream).toBeGreaterThan(1024 * 1024)
      // The connection window (a WINDOW_UPDATE with the SETTINGS), less what is still unacknowledged.
      expect(session.state.remoteWindowSize).toBeGreaterThan(H2_CONNECTION_WINDOW_BYTES - 300_000)
    } finally {
      session.close()
    }
  })

  it('keeps an HTTP/1.1 connection alive across requests', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const sockets = new Set<unknown>()
    const get = () =>
      new Promise<number>((resolve, reject) => {
        const req = http.get(`${node.url}/healthz`, { agent }, (res) => {
          sockets.add(res.socket)
          res.resume()
          res.on('end', () => resolve(res.statusCode ?? 0))
        })
        req.on('error', reject)
      })
    expect([await get(), await get()]).toEqual([200, 200])
    expect(sockets.size).toBe(1)
    agent.destroy()
  })

  it('streams SSE over h2c without connection-specific headers', async () => {
    const session = await h2Connect(node.url)
    try {
      const body = JSON.stringify({ model: 'zl-test-model', messages: [{ role: 'user', content: 'hi' }], stream: true })
      const res = await h2Request(session, 'POST', '/v1/chat/completions', body)
      expect(res.status).toBe(200)
      expect(res.headers['content-type']).toContain('text/event-stream')
      expect(res.headers['x-accel-buffering']).toBe('no')
      expect(res.body.trimEnd().endsWith('data: [DONE]')).toBe(true)
    } finally {
      session.close()
    }
  })
})

describe('TLS listener', () => {
  let tls: TestCert
  let node: TestNode
  let cert: string
  beforeAll(async () => {
    tls = makeSelfSignedCert()
    cert = tls.cert
    node = await startTestNode({ allowUnsigned: true, tls: { cert, key: tls.key } })
  })
  afterAll(async () => {
    await node?.close()
    tls.remove()
  })

  it('negotiates h2 by ALPN', async () => {
    const session = await h2Connect(node.url, { ca: cert })
    try {
      expect(session.alpnProtocol).toBe('h2')
      const res = await h2Request(session, 'POST', '/v1/chat/completions', chatBody)
      expect(res.status).toBe(200)
      expect(session.remoteSettings.initialWindowSize).toBe(h2Windows(1024 * 1024).stream)
      expect(session.state.remoteWindowSize).toBeGreaterThan(H2_CONNECTION_WINDOW_BYTES - 100_000)
      expect(JSON.parse(res.body).choices[0].message.content).toBe('Hello!')
    } finally {
      session.close()
    }
  })

  it('still serves HTTP/1.1 clients', async () => {
    const status = await new Promise<{ status: number; alpn: string | false | null }>((resolve, reject) => {
      const req = https.get(`${node.url}/healthz`, { ca: cert, agent: new https.Agent({ ALPNProtocols: ['http/1.1'] }) }, (res) => {
        const alpn = (res.socket as TLSSocket).alpnProtocol
        res.resume()
        res.on('end', () => resolve({ status: res.statusCode ?? 0, alpn }))
      })
      req.on('error', reject)
    })
    expect(status).toEqual({ status: 200, alpn: 'http/1.1' })
  })
})
