/**
 * Bench-only reference: the least a Hono-on-Node proxy can do — read the body, send it to one
 * upstream with the same signed headers, stream the answer back. No auth, no limits, no
 * validation, no routing. The edge scenario runs it beside the real edge so the edge's cost is
 * seen against the framework's own floor on this machine, in the same run (FACTS.md: ~1.5k req/s
 * on one core, +1.3–1.5 ms TTFB). Env: UPSTREAM_URL, PORT (0 = any), UPSTREAM_H2=1 (reach the
 * upstream through the Node edge's own upstream, one multiplexed h2c session,
 * edge/src/proxy/h2-upstream.ts, instead of undici's HTTP/1.1 pool: the protocol's cost, apart
 * from ours). Prints {"msg":"ready","url"}.
 */
import { Readable } from 'node:stream'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { Pool } from 'undici'
import { createH2Upstream } from '../../edge/src/proxy/h2-upstream.ts'

const upstream = process.env.UPSTREAM_URL
if (!upstream) throw new Error('UPSTREAM_URL is required')
const h2 = process.env.UPSTREAM_H2 === '1'
const pool = new Pool(upstream, { connections: 128, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 })
const edgeUpstream = h2 ? createH2Upstream({ connectTimeoutMs: 10_000 }) : undefined
const FORWARDED = ['content-type', 'x-request-id', 'x-zl-signature', 'anthropic-version']

const app = new Hono()
app.post('*', async (c) => {
  const body = new Uint8Array(await c.req.arrayBuffer())
  const headers: Record<string, string> = {}
  for (const name of FORWARDED) {
    const v = c.req.header(name)
    if (v !== undefined) headers[name] = v
  }
  if (edgeUpstream) {
    const res = await edgeUpstream.fetch(upstream + c.req.path, { method: 'POST', headers, body, signal: c.req.raw.signal })
    const out = new Headers()
    const type = res.headers.get('content-type')
    if (type !== null) out.set('content-type', type)
    return new Response(res.body, { status: res.status, headers: out })
  }
  const res = await pool.request({ origin: upstream, path: c.req.path, method: 'POST', headers, body, signal: c.req.raw.signal })
  const out = new Headers()
  const type = res.headers['content-type']
  if (typeof type === 'string') out.set('content-type', type)
  return new Response(Readable.toWeb(res.body) as ReadableStream<Uint8Array>, { status: res.statusCode, headers: out })
})

const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: Number(process.env.PORT ?? 0), overrideGlobalObjects: false }, (info) => {
  console.log(JSON.stringify({ msg: 'ready', url: `http://127.0.0.1:${info.port}` }))
})
const stop = () => server.close(() => process.exit(0))
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
