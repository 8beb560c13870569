/**
 * Stand-in GPU nodes for the three local regions (DESIGN.md §9 coordinates), a control endpoint
 * that tests in workerd reach over HTTP, a black hole (accepts, never answers: a hung Redis) and
 * a dead port (nothing listens: connection refused).
 *
 * Control API (JSON):
 *   POST /script    { requestId, modes: { [nodeId]: Mode } }
 *   GET  /received?requestId=ID                      → Received[]
 *   GET  /wait?requestId=ID&until=received|clientClosed|completed[&node=ID]
 *        → the first matching Received, as soon as it exists (408 after 10 s)
 *   ANY  /blackhole/...                              → never answered
 */
import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { startStandIn, type Mode, type Received, type StandIn } from './stand-in-node.ts'

export const REGIONS = [
  { id: 'us-east', lat: 39.0, lon: -77.5 },
  { id: 'eu-west', lat: 53.3, lon: -6.3 },
  { id: 'ap-south', lat: 19.1, lon: 72.9 },
] as const

export interface Fleet {
  nodes: StandIn[]
  /** GPU_NODES for these stand-ins (region = id), serving model `tiny`. */
  gpuNodes: { id: string; url: string; region: string; lat: number; lon: number; models: string[] }[]
  controlUrl: string
  /** A URL on which nothing listens. */
  deadUrl: string
  close(): Promise<void>
}

export async function startFleet(opts: { secret: string; protocol?: 'http1' | 'h2c' }): Promise<Fleet> {
  const script = new Map<string, Record<string, Mode>>()
  const log: Received[] = []
  const waiters = new Set<() => void>()
  const onChange = () => {
    for (const w of [...waiters]) w()
  }
  const nodes: StandIn[] = []
  for (const r of REGIONS) nodes.push(await startStandIn({ id: r.id, secret: opts.secret, protocol: opts.protocol ?? 'http1', script, log, onChange }))

  const control = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    if (url.pathname.startsWith('/blackhole')) return // never answered
    if (req.method === 'POST' && url.pathname === '/script') {
      let body = ''
      req.on('data', (c: Buffer) => (body += c.toString()))
      req.on('end', () => {
        const { requestId, modes } = JSON.parse(body) as { requestId: string; modes: Record<string, Mode> }
        script.set(requestId, modes)
        send(res, 200, { ok: true })
      })
      return
    }
    const requestId = url.searchParams.get('requestId') ?? ''
    if (url.pathname === '/received') return send(res, 200, log.filter((r) => r.requestId === requestId))
    if (url.pathname === '/wait') {
      const until = url.searchParams.get('until') as 'received' | 'clientClosed' | 'completed'
      const node = url.searchParams.get('node')
      const match = () => log.find((r) => r.requestId === requestId && (!node || r.node === node) && (until === 'received' || r[until]))
      const check = () => {
        const hit = match()
        if (!hit) return
        waiters.delete(check)
        clearTimeout(timer)
        send(res, 200, hit)
      }
      const timer = setTimeout(() => {
        waiters.delete(check)
        send(res, 408, { error: `no ${until} for ${requestId}` })
      }, 10_000)
      waiters.add(check)
      check()
      return
    }
    send(res, 404, { error: 'unknown control route' })
  })
  const controlSockets = new Set<net.Socket>()
  control.on('connection', (s: net.Socket) => {
    controlSockets.add(s)
    s.once('close', () => controlSockets.delete(s))
  })
  await new Promise<void>((resolve) => control.listen(0, '127.0.0.1', resolve))
  const controlPort = (control.address() as AddressInfo).port

  return {
    nodes,
    gpuNodes: REGIONS.map((r, i) => ({ id: r.id, url: nodes[i]!.url, region: r.id, lat: r.lat, lon: r.lon, models: ['tiny'] })),
    controlUrl: `http://127.0.0.1:${controlPort}`,
    deadUrl: `http://127.0.0.1:${await deadPort()}`,
    close: async () => {
      await Promise.all(nodes.map((n) => n.close()))
      for (const s of controlSockets) s.destroy()
      await new Promise<void>((resolve) => control.close(() => resolve()))
    },
  }
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(body))
}

/** A port that was free a moment ago; nothing listens on it afterwards. */
async function deadPort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  const { port } = s.address() as AddressInfo
  await new Promise<void>((resolve) => s.close(() => resolve()))
  return port
}
