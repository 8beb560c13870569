/**
 * Which protocol the Node edge takes to a node (node-upstream.ts), against real servers that speak
 * one protocol each (node:http and node:http2; the GPU node speaks both on one port): a node of
 * the edge's own region gets HTTP/1.1, any other region's HTTP/2, requests and warm-ups alike.
 * Control: with `protocol: 'h2'` a nearby node is reached over HTTP/2.
 */
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createNodeUpstream } from './node-upstream.ts'

const seen: string[] = []
const handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
  seen.push(`${req.url} ${req.httpVersion}`)
  res.end('ok')
}
const h1Server = http.createServer(handler)
const h2Server = http2.createServer(handler)
let near: string
let far: string

const listen = async (s: http.Server | http2.Http2Server) => {
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}
beforeAll(async () => {
  near = await listen(h1Server)
  far = await listen(h2Server)
})
afterAll(async () => {
  h1Server.closeAllConnections()
  await Promise.all([h1Server, h2Server].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))))
})

describe('the Node edge upstream by region', () => {
  it("reaches a node of the edge's own region over HTTP/1.1 and any other over HTTP/2", async () => {
    seen.length = 0
    const up = createNodeUpstream({ protocol: 'auto', localRegion: 'here', connectTimeoutMs: 2000 })
    try {
      await up.warm([{ url: `${near}/`, region: 'here' }, { url: `${far}/`, region: 'far' }])
      expect(up.connected().sort()).toEqual([near, far].sort())
      for (const [origin, region] of [[near, 'here'], [far, 'far']] as const) {
        const res = await up.fetch(`${origin}/v1/${region}`, { method: 'POST', body: '{}', nodeRegion: region })
        expect(Buffer.from(await res.arrayBuffer()).toString()).toBe('ok')
      }
      expect(seen.sort()).toEqual(['/healthz 1.1', '/healthz 2.0', '/v1/far 2.0', '/v1/here 1.1'])
    } finally {
      await up.close()
    }
  })

  it('reaches every node over HTTP/2 with UPSTREAM_PROTOCOL=h2 (control)', async () => {
    seen.length = 0
    const up = createNodeUpstream({ protocol: 'h2', localRegion: 'here', connectTimeoutMs: 2000 })
    try {
      const res = await up.fetch(`${far}/v1/here`, { method: 'POST', body: '{}', nodeRegion: 'here' })
      expect(Buffer.from(await res.arrayBuffer()).toString()).toBe('ok')
      expect(seen).toEqual(['/v1/here 2.0'])
    } finally {
      await up.close()
    }
  })
})
