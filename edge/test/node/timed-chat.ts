/**
 * Test support for the WAN tests (cross-region, failover-wan): one streamed chat request through
 * an edge from a client at `geo` (x-zl-client-geo, DEV_MODE), timed to its first body byte.
 */
import { performance } from 'node:perf_hooks'
import { request, type Dispatcher } from 'undici'

export interface TimedChat {
  status: number
  /** The edge's x-zl-region: where it was served. */
  region: string
  ttfbMs: number
  text: string
}

export async function timedChat(origin: string, opts: { dispatcher: Dispatcher; key: string; geo: { lat: number; lon: number }; body: string }): Promise<TimedChat> {
  const started = performance.now()
  const res = await request(`${origin}/v1/chat/completions`, {
    method: 'POST',
    dispatcher: opts.dispatcher,
    headers: { authorization: `Bearer ${opts.key}`, 'content-type': 'application/json', 'x-zl-client-geo': `${opts.geo.lat},${opts.geo.lon}` },
    body: opts.body,
  })
  let first: number | undefined
  let text = ''
  for await (const chunk of res.body) {
    first ??= performance.now() - started
    text += String(chunk)
  }
  return { status: res.statusCode, region: String(res.headers['x-zl-region']), ttfbMs: first!, text }
}
